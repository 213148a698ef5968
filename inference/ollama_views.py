"""Ollama's API under /api: chat, generate, embed, the model listings and pull, for tools that
speak only Ollama (Open WebUI, Continue, Home Assistant). Errors are Ollama's {"error": ...};
keys as on /v1 (Authorization: Bearer; Ollama's clients send none unless told, which a server
with REQUIRE_API_KEY=false accepts). /api/pull takes the admin token too: a pull from the hub
is the operator's."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from inference.edge import API_KEY, endpoint
from inference.edge.auth import OPERATOR_OR_KEY
from inference.edge.dialects import OLLAMA
from inference.protocol.errors import APIError
from inference.protocol.ollama.requests import (
    ChatRequest,
    EmbeddingsRequest,
    EmbedRequest,
    GenerateRequest,
    PullRequest,
    ShowRequest,
)
from inference.protocol.ollama.responses import (
    ChatResponse,
    EmbeddingsResponse,
    EmbedResponse,
    GenerateResponse,
    ListResponse,
    ProcessResponse,
    ShowResponse,
    StatusResponse,
    VersionResponse,
)
from inference.serving.context import RequestContext
from inference.serving.ollama import embed, models
from inference.serving.ollama.generate import answer_ollama
from inference.serving.ollama.pull import pull_model
from inference.serving.sse import EventStream

ANY_METHOD = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


@endpoint(
    "POST",
    body=ChatRequest,
    auth=API_KEY,
    dialect=OLLAMA,
    record=True,
    response=ChatResponse,
    stream=ChatResponse,
)
async def chat(
    request: HttpRequest, ctx: RequestContext, body: ChatRequest
) -> ChatResponse | EventStream:
    return await answer_ollama(body, ctx)


@endpoint(
    "POST",
    body=GenerateRequest,
    auth=API_KEY,
    dialect=OLLAMA,
    record=True,
    response=GenerateResponse,
    stream=GenerateResponse,
)
async def generate(
    request: HttpRequest, ctx: RequestContext, body: GenerateRequest
) -> GenerateResponse | EventStream:
    return await answer_ollama(body, ctx)


@endpoint(
    "POST", body=EmbedRequest, auth=API_KEY, dialect=OLLAMA, record=True, response=EmbedResponse
)
async def embed_view(
    request: HttpRequest, ctx: RequestContext, body: EmbedRequest
) -> EmbedResponse:
    return await embed.answer_embed(body, ctx)


@endpoint(
    "POST",
    body=EmbeddingsRequest,
    auth=API_KEY,
    dialect=OLLAMA,
    record=True,
    response=EmbeddingsResponse,
)
async def embeddings(
    request: HttpRequest, ctx: RequestContext, body: EmbeddingsRequest
) -> EmbeddingsResponse:
    return await embed.answer_legacy_embeddings(body, ctx)


@endpoint("GET", "HEAD", auth=API_KEY, dialect=OLLAMA, response=ListResponse)
async def tags(request: HttpRequest, ctx: RequestContext) -> ListResponse:
    return await models.list_tags(ctx.caller)


@endpoint("POST", body=ShowRequest, auth=API_KEY, dialect=OLLAMA, response=ShowResponse)
async def show(request: HttpRequest, ctx: RequestContext, body: ShowRequest) -> ShowResponse:
    return await models.show_model(body, ctx.caller)


@endpoint("GET", "HEAD", auth=API_KEY, dialect=OLLAMA, response=ProcessResponse)
async def ps(request: HttpRequest, ctx: RequestContext) -> ProcessResponse:
    return await models.running_models(ctx.engine.health(), ctx.caller)


@endpoint("GET", "HEAD", dialect=OLLAMA, response=VersionResponse)
async def version(request: HttpRequest, ctx: RequestContext) -> VersionResponse:
    return models.version()


@endpoint("POST", body=PullRequest, auth=OPERATOR_OR_KEY, dialect=OLLAMA, response=StatusResponse)
async def pull(
    request: HttpRequest, ctx: RequestContext, body: PullRequest
) -> StatusResponse | EventStream:
    return await pull_model(body, ctx.caller)


@endpoint(*ANY_METHOD, dialect=OLLAMA)
async def not_found(request: HttpRequest, ctx: RequestContext, path: str = "") -> HttpResponse:
    raise APIError(f"Unknown endpoint: {request.method} {request.path}", status=404)
