"""The operator's pages: a live dashboard at / and a chat playground (staff only)."""

from __future__ import annotations

from functools import wraps

from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie

from apikeys.auth import Caller
from catalog.models import CatalogModel
from inference.control_views import staff_or_token
from inference.decorators import View, json_body, openai_api
from inference.observability import records
from inference.protocol.chat import ChatCompletionRequest
from inference.serving.control import engine_health, pool_status
from inference.views import answer_chat


@staff_member_required
@ensure_csrf_cookie  # the page's buttons post to /control with it
def index(request: HttpRequest) -> HttpResponse:
    return render(request, "dashboard/index.html", {"title": "Dashboard"})


@staff_member_required
@ensure_csrf_cookie
def playground(request: HttpRequest) -> HttpResponse:
    models = CatalogModel.objects.filter(enabled=True).values_list("public_id", flat=True)
    return render(request, "dashboard/playground.html", {"title": "Playground", "models": models})


@openai_api("GET", record=False)
@staff_or_token
async def state(request: HttpRequest) -> HttpResponse:
    """Everything the dashboard shows, polled every second."""
    health = engine_health()
    pool = await pool_status()
    return JsonResponse(
        {
            "backend": {
                "device": pool.pop("device"),
                "blas": settings.BLAS.library or "MLX's bundled BLAS",
            },
            "engine": {
                "ready": not health["not_ready"],
                "restarts": health["restarts"],
                "last_failure": health["last_failure"],
                "running": sum(m["active_sequences"] for m in pool["models"]),
                "queued": health["queued"],
                "tokens_per_second": round(sum(m["tokens_per_second"] for m in pool["models"]), 1),
            },
            "pool": pool,
            "recent": list(records.recent),
        }
    )


def as_staff(view: View) -> View:
    """The playground speaks for the logged-in staff member: every enabled model, no key."""

    @wraps(view)
    async def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        user = await request.auser()
        name = f"staff:{user.get_username()}" if user.is_authenticated else "admin-token"
        request.caller = Caller(None, name, None, None)
        if entry := records.current.get():
            entry.key = name
        return await view(request, *args, **kwargs)

    return wrapper


# Same answer as /v1/chat/completions; authenticated by the staff session (with CSRF) or the
# admin token instead of an API key.
playground_chat = openai_api("POST")(
    staff_or_token(as_staff(json_body(ChatCompletionRequest)(answer_chat)))
)
