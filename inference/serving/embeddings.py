"""Inputs to one engine embedding job, for every dialect (`embed_inputs`): the vectors each
dialect's writer puts in its own shape (openai/embeddings.py, ollama/embed.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np
from django.conf import settings

from inference.engine.types import EngineError
from inference.protocol.errors import APIError
from inference.serving.context import RequestContext
from inference.serving.errors import api_error
from inference.serving.generation import TIMEOUT
from inference.serving.prelude import admit
from inference.serving.prepare import embedding_ids
from inference.serving.resolve import ResolvedModel


@dataclass(frozen=True)
class Embeddings:
    """What the engine embedded for a request: one vector per input, in order."""

    resolved: ResolvedModel
    vectors: list[np.ndarray]
    prompt_tokens: int


async def embed_inputs(
    model: str,
    items: list[str | list[int]],
    ctx: RequestContext,
    input_type: str | None = None,
    dimensions: int | None = None,
) -> Embeddings:
    """The vectors of `items` on the embedding model `model` names, for every dialect: the
    input cap, the catalog's prefix for `input_type`, tokenizing off the engine thread, the
    engine's job under the request timeout, then cut to `dimensions`."""
    limit = settings.EMBEDDINGS_MAX_INPUTS
    if len(items) > limit:
        raise APIError(
            f"This request has {len(items)} inputs; this server embeds at most {limit} in one "
            "request (EMBEDDINGS_MAX_INPUTS).",
            param="input",
            code="too_many_inputs",
        )
    resolved = await admit(ctx, model, purpose="embedding")
    entry = resolved.entry
    prefix = {"query": entry.query_prefix, "document": entry.document_prefix}.get(
        input_type or "", ""
    )
    inputs = [prefix + item if isinstance(item, str) else tuple(item) for item in items]
    inputs = await embedding_ids(resolved.spec, inputs)  # tokenized off the engine thread
    try:
        async with asyncio.timeout(settings.REQUEST_TIMEOUT):
            embedded = await ctx.engine.embed(
                resolved.spec,
                inputs,
                max_tokens=entry.max_input_tokens,
                truncate=entry.truncate_inputs,
                owner=ctx.caller.name,
                priority=ctx.priority,
            )
    except TimeoutError:
        raise api_error(TIMEOUT) from None
    except EngineError as exc:
        raise api_error(exc) from None
    if ctx.record is not None:
        ctx.record.prompt_tokens = embedded.prompt_tokens
    vectors = shaped(embedded.vectors, dimensions, resolved.spec.normalize)
    return Embeddings(resolved, vectors, embedded.prompt_tokens)


def shaped(vectors: list[np.ndarray], dimensions: int | None, normalize: bool) -> list[np.ndarray]:
    """Cut to the first `dimensions` (Matryoshka-style, as OpenAI's v3 models do), unit length
    again when the model's vectors are normalized."""
    if dimensions is None:
        return vectors
    size = len(vectors[0])
    if dimensions > size:
        raise APIError(
            f"dimensions is {dimensions}, but this model's embeddings have {size}.",
            param="dimensions",
            code="invalid_value",
        )
    cut = [v[:dimensions] for v in vectors]
    if normalize:
        cut = [v / max(float(np.linalg.norm(v)), 1e-12) for v in cut]
    return cut
