from django.contrib import admin
from django.urls import include, path

from inference import control_views
from inference.views import (
    apply_template,
    detokenize,
    health,
    live,
    metrics,
    openapi,
    ready,
    rerank,
    tokenize,
)

urlpatterns = [
    path("admin/", admin.site.urls),
    path("v1/", include("inference.urls")),
    path("api/", include("inference.ollama_urls")),  # Ollama's API
    path("health", health),
    path("health/live", live),
    path("health/ready", ready),
    path("openapi.json", openapi),
    path("metrics", metrics),
    # llama.cpp's server has these at its root, vLLM's too; the same views as under /v1.
    path("tokenize", tokenize),
    path("detokenize", detokenize),
    path("apply-template", apply_template),
    # Rerankers' clients (Jina, Cohere v1 and v2, vLLM's) post to these.
    path("rerank", rerank),
    path("v2/rerank", rerank),
    path("", include("dashboard.urls")),
    path("control/pool", control_views.pool),
    path("control/engine/fault", control_views.engine_fault),
    path("control/models/<str:model_id>/warm", control_views.warm),
    path("control/models/<str:model_id>/unload", control_views.unload),
]
