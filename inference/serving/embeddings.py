"""POST /v1/embeddings: inputs to one engine embedding job, vectors to OpenAI's list."""

from __future__ import annotations

import asyncio
import base64

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
from inference.serving.resolve import resolve_model


async def answer_embeddings(request: EmbeddingRequest, ctx: RequestContext) -> EmbeddingList:
    if drain.draining:
        raise api_error(SHUTTING_DOWN)
    items = request.inputs()
    limit = settings.EMBEDDINGS_MAX_INPUTS
    if len(items) > limit:
        raise APIError(
            f"This request has {len(items)} inputs; this server embeds at most {limit} in one "
            "request (EMBEDDINGS_MAX_INPUTS).",
            param="input",
            code="too_many_inputs",
        )
    resolved = await resolve_model(request.model, ctx.caller, purpose="embedding")
    entry = resolved.entry
    if ctx.record is not None:
        ctx.record.model = entry.public_id
    prefix = {"query": entry.query_prefix, "document": entry.document_prefix}.get(
        request.input_type or "", ""
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
    vectors = shaped(embedded.vectors, request.dimensions, resolved.spec.normalize)
    data = [
        Embedding(index=i, embedding=encode(v, request.encoding_format))
        for i, v in enumerate(vectors)
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
