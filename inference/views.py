"""The /v1 endpoints. Views parse, delegate to serving, and shape the HTTP response."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from apikeys.decorators import api_key_required
from catalog.models import CatalogModel
from inference.decorators import json_body, openai_api
from inference.http import error_response, json_response, sse_response
from inference.observability.metrics import registry
from inference.openapi import openapi_document
from inference.protocol.chat import ChatCompletionRequest
from inference.protocol.completions import CompletionRequest
from inference.protocol.errors import APIError, model_not_found
from inference.protocol.models import ModelCard, ModelList
from inference.serving.chat import complete_chat, start_chat, stream_chat
from inference.serving.completions import complete, start_completion, stream_completion
from inference.serving.control import engine_health


async def answer_chat(request: HttpRequest, body: ChatCompletionRequest) -> HttpResponse:
    run = await start_chat(body, request.caller)
    if body.stream:
        return sse_response(stream_chat(run))
    return json_response(await complete_chat(run))


chat_completions = openai_api("POST")(
    api_key_required(json_body(ChatCompletionRequest)(answer_chat))
)


@openai_api("POST")
@api_key_required
@json_body(CompletionRequest)
async def completions(request: HttpRequest, body: CompletionRequest) -> HttpResponse:
    run = await start_completion(body, request.caller)
    if body.stream:
        return sse_response(stream_completion(run))
    return json_response(await complete(run))


def model_card(entry: CatalogModel) -> ModelCard:
    return ModelCard(id=entry.public_id, created=int(entry.created.timestamp()))


@openai_api("GET")
@api_key_required
async def list_models(request: HttpRequest) -> HttpResponse:
    entries = CatalogModel.objects.filter(enabled=True)
    cards = [model_card(e) async for e in entries if request.caller.may_use(e.public_id)]
    return json_response(ModelList(data=cards))


@openai_api("GET")
@api_key_required
async def retrieve_model(request: HttpRequest, model_id: str) -> HttpResponse:
    if not request.caller.may_use(model_id):
        raise model_not_found(model_id)
    try:
        entry = await CatalogModel.objects.aget(public_id=model_id, enabled=True)
    except CatalogModel.DoesNotExist:
        raise model_not_found(model_id) from None
    return json_response(model_card(entry))


async def openapi(request: HttpRequest) -> HttpResponse:
    return JsonResponse(openapi_document())


async def health(request: HttpRequest) -> HttpResponse:
    """What the engine is doing; cheap enough to poll."""
    state = engine_health()
    return JsonResponse(
        {
            "status": "ok" if not state["not_ready"] else "unavailable",
            "running_sequences": state["running"],
            "queued_sequences": state["queued"],
            "loaded_models": state["loaded_models"],
            "engine_restarts": state["restarts"],
            "last_engine_failure": state["last_failure"],
            "draining": state["draining"],
            "blas": settings.BLAS.library or "mlx-bundled",
        }
    )


async def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus scrape endpoint (no secrets in it: key names are never labels)."""
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


async def live(request: HttpRequest) -> HttpResponse:
    """The process answers HTTP; touches nothing else (not even the engine)."""
    return JsonResponse({"status": "ok"})


async def ready(request: HttpRequest) -> HttpResponse:
    """Whether to send this instance traffic: engine running (not restarting), not draining."""
    if reasons := engine_health()["not_ready"]:
        return JsonResponse({"status": "unavailable", "reasons": reasons}, status=503)
    return JsonResponse({"status": "ok"})


async def not_found(request: HttpRequest, path: str = "") -> HttpResponse:
    return error_response(
        APIError(
            f"Unknown endpoint: {request.method} {request.path}", status=404, code="unknown_url"
        )
    )
