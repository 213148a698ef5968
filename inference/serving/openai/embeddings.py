"""POST /v1/embeddings: the vectors of serving's one embedding path as OpenAI's list, floats
or base64."""

from __future__ import annotations

import base64

import numpy as np

from inference.protocol.openai.embeddings import (
    Embedding,
    EmbeddingList,
    EmbeddingRequest,
    EmbeddingUsage,
)
from inference.serving.context import RequestContext
from inference.serving.embeddings import embed_inputs


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


def encode(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        # OpenAI's bytes: little-endian float32, which its SDK reads with np.frombuffer.
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.astype(np.float32).tolist()
