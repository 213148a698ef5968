"""Reranking, for every dialect: a query and its documents paired as the model reads them on a
prompt thread (engine/rerank/tokens.py, no weights), scored on the engine thread as one batched
job. The dialect's writer sorts and shapes them (openai/rerank.py: Jina's and Cohere's)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from django.conf import settings

from inference.engine.types import EngineError, ModelSpec
from inference.protocol.errors import APIError
from inference.serving.context import RequestContext
from inference.serving.errors import api_error
from inference.serving.generation import TIMEOUT
from inference.serving.prelude import admit
from inference.serving.prepare import check_characters, with_vocabulary


@dataclass(frozen=True)
class Scored:
    """Each document's relevance to the query, in the documents' order, and the tokens read."""

    scores: list[float]
    prompt_tokens: int


async def score_documents(
    model: str, query: str, texts: list[str], instruction: str, ctx: RequestContext
) -> Scored:
    """The documents' scores on the rerank model `model` names: the document cap, the
    character check, the pairs tokenized off the engine thread, one engine job."""
    limit = settings.EMBEDDINGS_MAX_INPUTS
    if len(texts) > limit:
        raise APIError(
            f"This request has {len(texts)} documents; this server reranks at most {limit} in "
            "one request (EMBEDDINGS_MAX_INPUTS).",
            param="documents",
            code="too_many_inputs",
        )
    resolved = await admit(ctx, model, purpose="rerank")
    check_characters(len(query) * len(texts) + sum(map(len, texts)), "documents")
    pairs = await _pairs(resolved.spec, query, texts, instruction, resolved.entry.max_input_tokens)
    scores = await _scores(ctx, resolved.spec, pairs)
    tokens = sum(len(pair) for pair in pairs)
    if ctx.record is not None:
        ctx.record.prompt_tokens = tokens
    return Scored(scores, tokens)


async def _pairs(
    spec: ModelSpec, query: str, texts: list[str], instruction: str, cap: int | None
) -> list[tuple[int, ...]]:
    def build(vocabulary) -> list[tuple[int, ...]]:
        context = vocabulary.context_length
        limit = min(cap or context, context)
        return vocabulary.tokenizer(query, texts, limit, instruction)

    return await with_vocabulary(spec, build)


async def _scores(ctx: RequestContext, spec: ModelSpec, pairs: list) -> list[float]:
    try:
        async with asyncio.timeout(settings.REQUEST_TIMEOUT):
            return await ctx.engine.rerank(spec, pairs, owner=ctx.caller.name)
    except TimeoutError:
        raise api_error(TIMEOUT) from None
    except EngineError as exc:
        raise api_error(exc) from None
