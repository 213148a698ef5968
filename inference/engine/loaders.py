"""Which library reads a catalog model's weights, by what the model is for. Engine thread only.

Chat models load through mlx-lm; vision-language chat models through mlx-vlm
(`engine/vision/`); embedding models through mlx-lm (decoders) or mlx-embeddings (encoders)
(`engine/embedding/`); rerankers through mlx-embeddings' encoders with a classifier head, or
mlx-lm (`engine/rerank/`). Each returns the same triple, so the pool treats them all alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlx_lm.utils import _download as download
from mlx_lm.utils import load_model

from inference.engine.chunked import serve_within_first_chunk
from inference.engine.types import ModelSpec
from inference.engine.vocabulary import tokenizer_copy


def load_weights(spec: ModelSpec) -> tuple[Any, Any, dict]:
    """(model, tokenizer or processor, config.json) for `spec`."""
    if spec.purpose == "embedding":
        from inference.engine.embedding.load import load_embedder

        return load_embedder(spec.location)
    if spec.purpose == "rerank":
        from inference.engine.rerank.load import load_reranker

        return load_reranker(spec.location)
    if spec.vision:
        from inference.engine.vision.load import load_vision

        return load_vision(spec.location)
    # The tokenizer first: a model whose files are gone fails with the vocabulary's message.
    tokenizer = tokenizer_copy(spec)
    path = download(spec.location) if spec.from_hub else Path(spec.location)
    model, config = load_model(path)
    serve_within_first_chunk(model)  # Llama 4: engine/chunked.py
    return model, tokenizer, config


def prepares_compute_format(spec: ModelSpec) -> bool:
    """Whether compute_format.prepare (float32 / CPU kernels) applies: mlx-lm chat models."""
    return spec.purpose == "chat" and not spec.vision
