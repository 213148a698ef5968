"""The operator's pages: a live dashboard at / (staff) and a chat playground (staff with the
catalog.use_playground permission)."""

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
    models = CatalogModel.objects.filter(enabled=True).values_list("public_id", flat=True)
    return render(request, "dashboard/playground.html", {"title": "Playground", "models": models})


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
