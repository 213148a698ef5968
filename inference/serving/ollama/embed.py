"""/api/embed (a list of inputs, a list of vectors) and the legacy /api/embeddings (one prompt,
one vector), on serving's one embedding path."""

from __future__ import annotations

import time

from inference.protocol.errors import APIError
from inference.protocol.ollama.requests import EmbeddingsRequest, EmbedRequest
from inference.protocol.ollama.responses import EmbeddingsResponse, EmbedResponse
from inference.serving.context import RequestContext
from inference.serving.embeddings import embed_inputs
from inference.serving.ollama.generate import keep_alive


async def answer_embed(request: EmbedRequest, ctx: RequestContext) -> EmbedResponse:
    inputs = [request.input] if isinstance(request.input, str) else list(request.input)
    if not inputs or any(not text for text in inputs):
        raise APIError("input needs at least one text, and no empty one.", param="input")
    embedded = await embed_inputs(request.model, inputs, ctx, dimensions=request.dimensions)
    await keep_alive(request, ctx, embedded.resolved.entry.public_id)
    return EmbedResponse(
        model=request.name,
        embeddings=[v.astype("float32").tolist() for v in embedded.vectors],
        total_duration=int((time.monotonic() - ctx.started) * 1e9),
        load_duration=0,
        prompt_eval_count=embedded.prompt_tokens,
    )


async def answer_legacy_embeddings(
    request: EmbeddingsRequest, ctx: RequestContext
) -> EmbeddingsResponse:
    embedded = await embed_inputs(request.model, [request.prompt], ctx)
    await keep_alive(request, ctx, embedded.resolved.entry.public_id)
    return EmbeddingsResponse(embedding=embedded.vectors[0].astype("float32").tolist())
