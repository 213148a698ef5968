"""Attention over K/V in any of the engine's formats, as mlx-lm's model code calls it.

mlx-lm's `scaled_dot_product_attention` (models/base.py) tells quantized K/V by the cache it is
handed (`cache.bits`), and its quantized path takes no attention sinks. Neither holds for
every architecture: gpt-oss passes sinks, and Gemma 3n/4's KV-shared layers attend over an
earlier layer's K/V with no cache of their own. Here the K/V themselves say what they are: a
(packed, scales, biases) tuple is quantized, its bits and group read from the shapes. Routed
into a model's modules by `install` whenever its KV cache is quantized; the CPU kernels'
dispatcher (cpu/hooks.py) falls back to this one.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_map
from mlx_lm.models import base


def packing(queries: mx.array, keys: tuple) -> tuple[int, int]:
    """(bits, group size) of quantized keys over queries as wide as the keys' values."""
    width = queries.shape[-1]
    return keys[0].shape[-1] * 32 // width, width // keys[1].shape[-1]


def attention(queries, keys, values, cache=None, scale=1.0, mask=None, sinks=None):
    """mlx-lm's `scaled_dot_product_attention`, deciding by the K/V rather than the cache."""
    if isinstance(keys, tuple):
        return quantized(queries, keys, values, scale, mask, sinks)
    return mx.fast.scaled_dot_product_attention(
        queries, keys, values, scale=scale, mask=mask, sinks=sinks
    )


def quantized(
    queries: mx.array,
    keys: tuple,
    values: tuple,
    scale: float,
    mask: Any = None,
    sinks: mx.array | None = None,
) -> mx.array:
    """Attention over packed K/V, as mlx-lm's quantized attention computes it (without scaling
    the caller's queries in place, as that one does), and with attention sinks: a learned
    logit per head that takes a share of the softmax and gives nothing back (gpt-oss), which
    MLX's fused attention applies to plain K/V only."""
    bits, group = packing(queries, keys)
    batch, heads, length, width = queries.shape
    kv_heads = keys[0].shape[-3]
    repeats = heads // kv_heads
    queries = (queries * scale).reshape(batch, kv_heads, repeats, length, width)
    keys, values = (tree_map(lambda x: mx.expand_dims(x, -3), kv) for kv in (keys, values))
    scores = mx.quantized_matmul(queries, *keys, transpose=True, group_size=group, bits=bits)
    scores = _masked(scores, mask)
    if sinks is None:
        weights = mx.softmax(scores, axis=-1, precise=True)
    else:
        sink = mx.broadcast_to(
            sinks.astype(scores.dtype).reshape(1, kv_heads, repeats, 1, 1),
            (*scores.shape[:-1], 1),
        )
        weights = mx.softmax(mx.concatenate([sink, scores], axis=-1), axis=-1, precise=True)
        weights = weights[..., 1:]
    out = mx.quantized_matmul(weights, *values, transpose=False, group_size=group, bits=bits)
    return out.reshape(batch, heads, length, -1)


def _masked(scores: mx.array, mask: Any) -> mx.array:
    """Scores (batch, kv heads, repeats, queries, keys) under a causal, boolean or additive
    mask, as mlx-lm's quantized attention applies it."""
    if mask is None:
        return scores
    if isinstance(mask, str):
        queries, keys = scores.shape[-2:]
        mask = mx.arange(keys - queries, keys)[:, None] >= mx.arange(keys)[None]
    elif mask.ndim > 3:
        mask = mx.expand_dims(mask, -3)
    if mask.dtype == mx.bool_:
        return mx.where(mask, scores, mx.finfo(scores.dtype).min)
    return scores + mask


def install(model: nn.Module) -> Counter:
    """Points every model-code module still calling mlx-lm's attention at `attention`;
    idempotent, and it leaves the CPU kernels' dispatcher where that is installed."""
    routed: Counter = Counter()
    names = {type(m).__module__ for _, m in model.named_modules()}
    for module in filter(None, (sys.modules.get(name) for name in names)):
        current = getattr(module, "scaled_dot_product_attention", None)
        if current is base.scaled_dot_product_attention:
            module.scaled_dot_product_attention = attention
            routed["kv_attention"] += 1
    return routed
