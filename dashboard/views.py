"""The operator's pages: a live dashboard at / (staff) and a chat page at /playground (staff with
the catalog.use_playground permission; its conversations: dashboard/conversations.py)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie

from catalog.models import CatalogModel
from inference.edge import OPENAI, PLAYGROUND, STAFF_OR_TOKEN, endpoint
from inference.observability import records
from inference.protocol.openai.chat import ChatCompletion, ChatCompletionRequest
from inference.serving.context import RequestContext
from inference.serving.control import dashboard_document, dashboard_series
from inference.serving.pipeline import answer
from inference.serving.sse import EventStream

# The two pages are HTML for people: Django's staff check, which redirects to the admin login.


@staff_member_required
@ensure_csrf_cookie  # the page's buttons post to /control with it
def index(request: HttpRequest) -> HttpResponse:
    # Behind a load balancer, which replica this page (and its polling) is talking to.
    context = {"title": "Dashboard", "instance": settings.INSTANCE_NAME}
    return render(request, "dashboard/index.html", context)


@staff_member_required
@permission_required("catalog.use_playground", raise_exception=True)  # 403, not a login loop
@ensure_csrf_cookie
def playground(request: HttpRequest) -> HttpResponse:
    """The chat page: the enabled chat models, each with the catalog's defaults, which the page
    shows beside its sampling controls and leaves to the server unless changed."""
    models = CatalogModel.objects.filter(enabled=True, purpose=CatalogModel.Purpose.CHAT)
    defaults = {entry.public_id: _defaults(entry) for entry in models.order_by("public_id")}
    return render(request, "dashboard/playground.html", {"title": "Chat", "defaults": defaults})


def _defaults(entry: CatalogModel) -> dict:
    return {
        "temperature": entry.default_temperature,
        "top_p": entry.default_top_p,
        "max_tokens": entry.default_max_tokens,
        "max_output_tokens": entry.max_output_tokens,
        "system_prompt": entry.system_prompt,
        "vision": entry.vision,
    }


@endpoint("GET", auth=STAFF_OR_TOKEN)
async def state(request: HttpRequest, ctx: RequestContext) -> dict:
    """Everything the dashboard shows, polled every second."""
    return await dashboard_document(ctx.engine.health(), list(records.recent))


@endpoint("GET", auth=STAFF_OR_TOKEN)
async def series(request: HttpRequest, ctx: RequestContext) -> dict:
    """The dashboard's charts: this instance's samples of the last hour."""
    return dashboard_series()


@endpoint("POST", body=ChatCompletionRequest, auth=PLAYGROUND, record=True)
async def playground_chat(
    request: HttpRequest, ctx: RequestContext, body: ChatCompletionRequest
) -> ChatCompletion | EventStream:
    """Same answer as /v1/chat/completions, for the logged-in staff member (recorded as
    staff:<name>): every enabled model, no API key."""
    return await answer(OPENAI, body, ctx)
