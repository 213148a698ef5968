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

from inference.engine import q6k
from inference.engine.chunked import serve_within_first_chunk
from inference.engine.types import ModelSpec
from inference.engine.vocabulary import tokenizer_copy


def load_weights(spec: ModelSpec, q6k_native: bool = False) -> tuple[Any, Any, dict, q6k.Q6KLoad]:
    """(model, tokenizer or processor, config.json, what became of its Q6_K layers) for
    `spec`; `q6k_native`: a chat model's Q6_K layers (engine/q6k.py) as the CPU kernels' own,
    else as MLX's 8-bit."""
    if spec.purpose == "embedding":
        from inference.engine.embedding.load import load_embedder

        return *load_embedder(spec.location), q6k.Q6KLoad()
    if spec.purpose == "rerank":
        from inference.engine.rerank.load import load_reranker

        return *load_reranker(spec.location), q6k.Q6KLoad()
    if spec.vision:
        from inference.engine.vision.load import load_vision

        return *load_vision(spec.location), q6k.Q6KLoad()
    # The tokenizer first: a model whose files are gone fails with the vocabulary's message.
    tokenizer = tokenizer_copy(spec)
    path = download(spec.location) if spec.from_hub else Path(spec.location)
    model, config, kept = q6k.load_model(path, native=q6k_native)
    serve_within_first_chunk(model)  # Llama 4: engine/chunked.py
    return model, tokenizer, config, kept


def prepares_compute_format(spec: ModelSpec) -> bool:
    """Whether compute_format.prepare (float32 / CPU kernels) applies: mlx-lm chat models."""
    return spec.purpose == "chat" and not spec.vision
