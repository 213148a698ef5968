"""Llama 4, served within its first attention chunk.

Three of every four Llama 4 layers attend within chunks of `attention_chunk_size` positions
(8192), and its position-free layers scale their queries by position past `floor_scale`
(8192). mlx-lm's model computes both from its first cache's positions as plain integers, one
set for the whole batch, and its ChunkedKVCache has no batched form: as it stands it cannot
take part in a continuous batch. Within the first chunk (and below the first temperature step)
neither does anything: a chunk's mask is the causal mask, and every query scale is 1. So the
engine serves Llama 4 there exactly: its context is capped at that limit (vocabulary.py's
`chunk_context_limit`, read from the config, so serving's prompt checks and the engine
agree), every layer keeps a plain KV cache, and every layer gets the batch's causal mask.
Past the first chunk is not served.
"""

from __future__ import annotations

from typing import Any

import mlx.nn as nn
from mlx_lm.models import llama4
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import KVCache


class OneChunkLlamaModel(llama4.LlamaModel):
    """mlx-lm's Llama 4 decoder, every layer under the batch's causal mask."""

    def __call__(self, inputs, cache=None):
        h = self.embed_tokens(inputs)
        if cache is None:
            cache = [None] * len(self.layers)
        mask = create_attention_mask(h, cache[0])
        for layer, c in zip(self.layers, cache, strict=True):
            h = layer(h, mask, cache=c)
        return self.norm(h)


class OneChunkModel(llama4.Model):
    """mlx-lm's Llama 4 with a plain KV cache in every layer."""

    def make_cache(self) -> list[Any]:
        return [KVCache() for _ in self.layers]


def serve_within_first_chunk(model: nn.Module) -> bool:
    """Makes a loaded Llama 4 the engine's one-chunk model (in place); False for others."""
    if type(model) is not llama4.Model:
        return type(model) is OneChunkModel
    model.__class__ = OneChunkModel
    model.language_model.model.__class__ = OneChunkLlamaModel
    for layer in model.layers:
        # Every query scale is 1 below floor_scale, and the scaling would read the batch's
        # per-row positions as one integer.
        layer.self_attn.attn_temperature_tuning = 0
    return True
