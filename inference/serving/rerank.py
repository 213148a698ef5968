"""POST /v1/rerank (and /rerank, /v2/rerank): a query and its documents paired as the model
reads them on a prompt thread (engine/rerank/tokens.py, no weights), scored on the engine
thread as one batched job, then sorted best first in Jina's and Cohere's shape."""

from __future__ import annotations

import asyncio

from django.conf import settings

from inference.engine.types import EngineError, ModelSpec
from inference.protocol.errors import APIError
from inference.protocol.openai.rerank import (
    APIVersion,
    BilledUnits,
    RerankedText,
    RerankMeta,
    RerankRequest,
    RerankResponse,
    RerankResult,
    RerankUsage,
)
from inference.serving.context import RequestContext
from inference.serving.drain import drain
from inference.serving.errors import api_error
from inference.serving.generation import SHUTTING_DOWN, TIMEOUT
from inference.serving.ids import completion_id
from inference.serving.prepare import check_characters, with_vocabulary
from inference.serving.resolve import resolve_model


async def answer_rerank(
    request: RerankRequest, ctx: RequestContext, api_version: str = "1"
) -> RerankResponse:
    if drain.draining:
        raise api_error(SHUTTING_DOWN)
    texts = request.texts()
    limit = settings.EMBEDDINGS_MAX_INPUTS
    if len(texts) > limit:
        raise APIError(
            f"This request has {len(texts)} documents; this server reranks at most {limit} in "
            "one request (EMBEDDINGS_MAX_INPUTS).",
            param="documents",
            code="too_many_inputs",
        )
    resolved = await resolve_model(request.model, ctx.caller, purpose="rerank")
    entry = resolved.entry
    if ctx.record is not None:
        ctx.record.model = entry.public_id
    check_characters(len(request.query) * len(texts) + sum(map(len, texts)), "documents")
    pairs = await _pairs(resolved.spec, request, texts, entry.max_input_tokens)
    scores = await _scores(ctx, resolved.spec, pairs)
    tokens = sum(len(pair) for pair in pairs)
    if ctx.record is not None:
        ctx.record.prompt_tokens = tokens
    return RerankResponse(
        id=completion_id("rerank"),
        model=request.model,
        results=_ranked(scores, texts, request.top_n, request.return_documents),
        usage=RerankUsage(prompt_tokens=tokens, total_tokens=tokens),
        meta=RerankMeta(
            api_version=APIVersion(version=api_version),
            billed_units=BilledUnits(input_tokens=tokens),
        ),
    )


async def _pairs(
    spec: ModelSpec, request: RerankRequest, texts: list[str], cap: int | None
) -> list[tuple[int, ...]]:
    def build(vocabulary) -> list[tuple[int, ...]]:
        context = vocabulary.context_length
        limit = min(cap or context, context)
        return vocabulary.tokenizer(request.query, texts, limit, request.instruction or "")

    return await with_vocabulary(spec, build)


async def _scores(ctx: RequestContext, spec: ModelSpec, pairs: list) -> list[float]:
    try:
        async with asyncio.timeout(settings.REQUEST_TIMEOUT):
            return await ctx.engine.rerank(spec, pairs, owner=ctx.caller.name)
    except TimeoutError:
        raise api_error(TIMEOUT) from None
    except EngineError as exc:
        raise api_error(exc) from None


def _ranked(
    scores: list[float], texts: list[str], top_n: int | None, with_documents: bool
) -> list[RerankResult]:
    """Best first; ties keep the documents' order (a stable sort)."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])[: top_n or len(scores)]
    return [
        RerankResult(
            index=i,
            relevance_score=scores[i],
            document=RerankedText(text=texts[i]) if with_documents else None,
        )
        for i in order
    ]
