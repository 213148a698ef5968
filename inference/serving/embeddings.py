"""Inputs to one engine embedding job (`embed_inputs`, for every dialect), and POST
/v1/embeddings: its vectors as OpenAI's list."""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass

import numpy as np
from django.conf import settings

from inference.engine.types import EngineError
from inference.protocol.errors import APIError
from inference.protocol.openai.embeddings import (
    Embedding,
    EmbeddingList,
    EmbeddingRequest,
    EmbeddingUsage,
)
from inference.serving.context import RequestContext
from inference.serving.drain import drain
from inference.serving.errors import api_error
from inference.serving.generation import SHUTTING_DOWN, TIMEOUT
from inference.serving.prepare import embedding_ids
from inference.serving.resolve import ResolvedModel, resolve_model


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
    if drain.draining:
        raise api_error(SHUTTING_DOWN)
    limit = settings.EMBEDDINGS_MAX_INPUTS
    if len(items) > limit:
        raise APIError(
            f"This request has {len(items)} inputs; this server embeds at most {limit} in one "
            "request (EMBEDDINGS_MAX_INPUTS).",
            param="input",
            code="too_many_inputs",
        )
    resolved = await resolve_model(model, ctx.caller, purpose="embedding")
    entry = resolved.entry
    if ctx.record is not None:
        ctx.record.model = entry.public_id
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
            )
    except TimeoutError:
        raise api_error(TIMEOUT) from None
    except EngineError as exc:
        raise api_error(exc) from None
    if ctx.record is not None:
        ctx.record.prompt_tokens = embedded.prompt_tokens
    vectors = shaped(embedded.vectors, dimensions, resolved.spec.normalize)
    return Embeddings(resolved, vectors, embedded.prompt_tokens)


async def answer_embeddings(request: EmbeddingRequest, ctx: RequestContext) -> EmbeddingList:
    embedded = await embed_inputs(
        request.model, request.inputs(), ctx, request.input_type, request.dimensions
    )
    data = [
        Embedding(index=i, embedding=encode(v, request.encoding_format))
        for i, v in enumerate(embedded.vectors)
    ]
    tokens = embedded.prompt_tokens
    usage = EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens)
    return EmbeddingList(data=data, model=request.model, usage=usage)


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


def encode(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        # OpenAI's bytes: little-endian float32, which its SDK reads with np.frombuffer.
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.astype(np.float32).tolist()
