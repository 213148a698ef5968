"""Ollama's API, mounted at /api (config/urls.py)."""

from django.urls import path, re_path

from inference import ollama_views

urlpatterns = [
    path("chat", ollama_views.chat),
    path("generate", ollama_views.generate),
    path("embed", ollama_views.embed_view),
    path("embeddings", ollama_views.embeddings),
    path("tags", ollama_views.tags),
    path("show", ollama_views.show),
    path("ps", ollama_views.ps),
    path("version", ollama_views.version),
    path("pull", ollama_views.pull),
    re_path(r"^(?P<path>.*)$", ollama_views.not_found),
]
