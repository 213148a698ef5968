"""The /v1 endpoints. Views parse, delegate to serving, and shape the HTTP response."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from catalog.models import CatalogModel
from inference.decorators import json_body, openai_api
from inference.http import error_response, json_response, sse_response
from inference.openapi import openapi_document
from inference.protocol.chat import ChatCompletionRequest
from inference.protocol.completions import CompletionRequest
from inference.protocol.errors import APIError, model_not_found
from inference.protocol.models import ModelCard, ModelList
from inference.runtime import get_engine
from inference.serving.chat import complete_chat, start_chat, stream_chat
from inference.serving.completions import complete, start_completion, stream_completion


@openai_api("POST")
@json_body(ChatCompletionRequest)
async def chat_completions(request: HttpRequest, body: ChatCompletionRequest) -> HttpResponse:
    run = await start_chat(body)
    if body.stream:
        return sse_response(stream_chat(run))
    return json_response(await complete_chat(run))


@openai_api("POST")
@json_body(CompletionRequest)
async def completions(request: HttpRequest, body: CompletionRequest) -> HttpResponse:
    run = await start_completion(body)
    if body.stream:
        return sse_response(stream_completion(run))
    return json_response(await complete(run))


def model_card(entry: CatalogModel) -> ModelCard:
    return ModelCard(id=entry.public_id, created=int(entry.created.timestamp()))


@openai_api("GET")
async def list_models(request: HttpRequest) -> HttpResponse:
    cards = [model_card(e) async for e in CatalogModel.objects.filter(enabled=True)]
    return json_response(ModelList(data=cards))


@openai_api("GET")
async def retrieve_model(request: HttpRequest, model_id: str) -> HttpResponse:
    try:
        entry = await CatalogModel.objects.aget(public_id=model_id, enabled=True)
    except CatalogModel.DoesNotExist:
        raise model_not_found(model_id) from None
    return json_response(model_card(entry))


async def openapi(request: HttpRequest) -> HttpResponse:
    return JsonResponse(openapi_document())


async def health(request: HttpRequest) -> HttpResponse:
    """Liveness plus what the engine is doing; cheap enough to poll."""
    engine = get_engine()
    return JsonResponse(
        {
            "status": "ok",
            "running_sequences": engine.running,
            "loaded_models": engine.pool.loaded_ids(),
            "blas": settings.BLAS.library or "mlx-bundled",
        }
    )


async def not_found(request: HttpRequest, path: str = "") -> HttpResponse:
    return error_response(
        APIError(
            f"Unknown endpoint: {request.method} {request.path}", status=404, code="unknown_url"
        )
    )
