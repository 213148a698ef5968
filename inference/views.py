"""The /v1 endpoints and the health probes. Views declare themselves at the edge, delegate to
serving, and return wire models or event streams; they never call into the engine (the probes
only read the health snapshot it publishes, through the request's engine handle)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from inference.edge import API_KEY, OPENAI, endpoint
from inference.edge.auth import EITHER_KEY, METRICS, OPERATOR_OR_PUBLIC
from inference.observability.metrics import registry
from inference.openapi import openapi_document
from inference.protocol.anthropic.models import AnthropicModel, AnthropicModelList
from inference.protocol.errors import APIError
from inference.protocol.openai.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
)
from inference.protocol.openai.completions import Completion, CompletionRequest
from inference.protocol.openai.embeddings import EmbeddingList, EmbeddingRequest
from inference.protocol.openai.models import ModelCard, ModelList
from inference.protocol.openai.rerank import RerankRequest, RerankResponse
from inference.protocol.openai.tokenize import (
    ApplyTemplateRequest,
    ApplyTemplateResponse,
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)
from inference.serving.anthropic.models import list_anthropic_models, retrieve_anthropic_model
from inference.serving.context import RequestContext
from inference.serving.control import health_document, not_ready
from inference.serving.openai import tokenize as tokenizer
from inference.serving.openai.embeddings import answer_embeddings
from inference.serving.openai.models import list_openai_models, retrieve_openai_model
from inference.serving.openai.rerank import answer_rerank
from inference.serving.pipeline import answer
from inference.serving.sse import EventStream

PROBE = ("GET", "HEAD")
ANY_METHOD = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


@endpoint(
    "POST",
    body=ChatCompletionRequest,
    auth=API_KEY,
    record=True,
    response=ChatCompletion,
    stream=ChatCompletionChunk,
)
async def chat_completions(
    request: HttpRequest, ctx: RequestContext, body: ChatCompletionRequest
) -> ChatCompletion | EventStream:
    return await answer(OPENAI, body, ctx)


@endpoint(
    "POST",
    body=CompletionRequest,
    auth=API_KEY,
    record=True,
    response=Completion,
    stream=Completion,
)
async def completions(
    request: HttpRequest, ctx: RequestContext, body: CompletionRequest
) -> Completion | EventStream:
    return await answer(OPENAI, body, ctx)


@endpoint("POST", body=EmbeddingRequest, auth=API_KEY, record=True, response=EmbeddingList)
async def embeddings(
    request: HttpRequest, ctx: RequestContext, body: EmbeddingRequest
) -> EmbeddingList:
    return await answer_embeddings(body, ctx)


@endpoint("POST", body=RerankRequest, auth=API_KEY, record=True, response=RerankResponse)
async def rerank(request: HttpRequest, ctx: RequestContext, body: RerankRequest) -> RerankResponse:
    # Cohere's v2 client posts to /v2/rerank and reads meta.api_version as "2".
    version = "2" if request.path.startswith("/v2/") else "1"
    return await answer_rerank(body, ctx, api_version=version)


@endpoint("POST", body=TokenizeRequest, auth=API_KEY, record=True, response=TokenizeResponse)
async def tokenize(
    request: HttpRequest, ctx: RequestContext, body: TokenizeRequest
) -> TokenizeResponse:
    return await tokenizer.tokenize(body, ctx)


@endpoint("POST", body=DetokenizeRequest, auth=API_KEY, record=True, response=DetokenizeResponse)
async def detokenize(
    request: HttpRequest, ctx: RequestContext, body: DetokenizeRequest
) -> DetokenizeResponse:
    return await tokenizer.detokenize(body, ctx)


@endpoint(
    "POST", body=ApplyTemplateRequest, auth=API_KEY, record=True, response=ApplyTemplateResponse
)
async def apply_template(
    request: HttpRequest, ctx: RequestContext, body: ApplyTemplateRequest
) -> ApplyTemplateResponse:
    return await tokenizer.apply_template(body, ctx)


def anthropic_client(request: HttpRequest) -> bool:
    """Anthropic's SDKs (and Claude Code) send anthropic-version on every request."""
    return "anthropic-version" in request.headers


@endpoint("GET", auth=EITHER_KEY, record=True, response=(ModelList, AnthropicModelList))
async def list_models(request: HttpRequest, ctx: RequestContext) -> ModelList | AnthropicModelList:
    if anthropic_client(request):
        return await list_anthropic_models(ctx.caller)
    return await list_openai_models(ctx.caller)


@endpoint("GET", auth=EITHER_KEY, record=True, response=(ModelCard, AnthropicModel))
async def retrieve_model(
    request: HttpRequest, ctx: RequestContext, model_id: str
) -> ModelCard | AnthropicModel:
    if anthropic_client(request):
        return await retrieve_anthropic_model(model_id, ctx.caller)
    return await retrieve_openai_model(model_id, ctx.caller)


@endpoint(*ANY_METHOD)
async def not_found(request: HttpRequest, ctx: RequestContext, path: str = "") -> HttpResponse:
    raise APIError(
        f"Unknown endpoint: {request.method} {request.path}", status=404, code="unknown_url"
    )


@endpoint(*PROBE)
async def openapi(request: HttpRequest, ctx: RequestContext) -> dict:
    return openapi_document()


# The probes answer anyone whether this instance is ok (their status and HTTP code); what it
# runs (models, sequences, BLAS, the last engine failure) only the admin token or staff.
@endpoint(*PROBE, auth=OPERATOR_OR_PUBLIC)
async def health(request: HttpRequest, ctx: RequestContext) -> dict:
    """What the engine is doing; cheap enough to poll."""
    document = health_document(ctx.engine.health())
    return document if ctx.caller.operator else {"status": document["status"]}


@endpoint(*PROBE, auth=METRICS)
async def metrics(request: HttpRequest, ctx: RequestContext) -> HttpResponse:
    """Prometheus scrape endpoint (no secrets in it: key names are never labels); behind
    METRICS_TOKEN when that is set, since it names the loaded models."""
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


@endpoint(*PROBE)
async def live(request: HttpRequest, ctx: RequestContext) -> dict:
    """The process answers HTTP; touches nothing else (not even the engine)."""
    return {"status": "ok"}


@endpoint(*PROBE, auth=OPERATOR_OR_PUBLIC)
async def ready(request: HttpRequest, ctx: RequestContext) -> dict | HttpResponse:
    """Whether to send this instance traffic: engine running (not restarting), not draining.
    Why not (a lost group's failure, say) is for operators only."""
    if reasons := not_ready(ctx.engine.health()):
        document = {"status": "unavailable"}
        if ctx.caller.operator:
            document["reasons"] = reasons
        return JsonResponse(document, status=503)
    return {"status": "ok"}
