"""Attention, SwiGLU and the gated delta rule as mlx-lm's model code calls them, routed to the
kernels.

mlx-lm's models call module-level functions (`scaled_dot_product_attention` from
models/base.py, `swiglu` from models/activations.py, `gated_delta_update` from
models/gated_delta.py) rather than layers, so the swap happens
in the model's own module: each name that still holds mlx-lm's function (or the engine's own
attention, engine/attention.py) is pointed at a dispatcher that uses the kernel for float32
queries over K/V it reads (float32 or float16 arrays, or a quantized cache's 8- or 4-bit
tuples) and the engine's attention otherwise (kernels turned off since, a float16 model in
the same process, attention sinks, K/V with no cache of their own).
"""

from __future__ import annotations

import sys
from collections import Counter

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import activations, base, gated_delta

from inference.engine import attention as kv_attention
from inference.engine.cpu.ext import ext
from inference.engine.cpu.status import in_use


def attention(queries, keys, values, cache=None, scale=1.0, mask=None, sinks=None):
    """mlx-lm's `scaled_dot_product_attention`: float32 queries over float32 or float16 K/V, or
    over a quantized cache's (packed, scales, biases) tuples, run in the kernel."""
    plain_mask = mask is None or isinstance(mask, mx.array) or mask == "causal"
    if (
        in_use()
        and queries.dtype == mx.float32
        and sinks is None
        and plain_mask
        and queries.shape[2] <= _keys(keys).shape[2]
    ):
        if _quantized_tuples(queries, keys, values):
            bits, group = kv_attention.packing(queries, keys)
            return ext.quantized_attention(
                queries, *keys, *values, scale=scale, mask=mask, group_size=group, bits=bits
            )
        if _plain(keys, values):
            return ext.attention(queries, keys, values, scale=scale, mask=mask)
    return kv_attention.attention(
        queries, keys, values, cache=cache, scale=scale, mask=mask, sinks=sinks
    )


# K/V the kernel reads as they are (anything else goes to the engine's attention unchanged).
_KV_DTYPES = (mx.float32, mx.float16)


def _keys(keys):
    return keys[0] if isinstance(keys, tuple) else keys


def _plain(keys, values) -> bool:
    if isinstance(keys, tuple) or isinstance(values, tuple):
        return False
    return keys.dtype in _KV_DTYPES and values.dtype in _KV_DTYPES


def _quantized_tuples(queries, keys, values) -> bool:
    """K/V as mx.quantize packs them (a cache's, or an earlier layer's for a KV-shared layer),
    in a format the kernel takes; bits and group come from the shapes."""
    if not (isinstance(keys, tuple) and isinstance(values, tuple)):
        return False
    if len(keys) != 3 or len(values) != 3:
        return False
    if keys[0].shape[-1] != values[0].shape[-1] or keys[1].shape[-1] != values[1].shape[-1]:
        return False  # V as wide as K, as the kernel reads them
    bits, group = kv_attention.packing(queries, keys)
    if bits not in (4, 8) or group not in (32, 64, 128):
        return False
    params = (keys[1], keys[2], values[1], values[2])
    return all(p.dtype in (mx.float32, mx.float16, mx.bfloat16) for p in params)


# mlx-lm's own functions, as they were before any routing: a MoE's SwitchGLU holds a SwiGLU
# module defined in activations.py, so that module itself is routed too, and a fallback
# through its name would call the dispatcher again.
MLX_SWIGLU = activations.swiglu


def swiglu(gate, x):
    if in_use() and gate.dtype == mx.float32 and gate.shape == x.shape:
        return ext.swiglu(gate, x)
    return MLX_SWIGLU(gate, x)


MLX_GATED_DELTA = gated_delta.gated_delta_update


def gated_delta_update(
    q, k, v, a, b, A_log, dt_bias, state=None, mask=None, *, use_kernel=True, **gating
):
    """mlx-lm's `gated_delta_update` (Qwen3.5, Qwen3-Next, OLMo hybrid) with the recurrence
    in the kernel: float32 q, one gate per value head. mlx-lm's CPU path runs it as seven
    whole-state operations per token; a gate per key (Kimi Linear, Kimi K3, Bailing) stays
    there."""
    if not (in_use() and q.dtype == mx.float32 and a.ndim == 3):
        return MLX_GATED_DELTA(
            q, k, v, a, b, A_log, dt_bias, state, mask, use_kernel=use_kernel, **gating
        )
    beta = mx.sigmoid(b) * (2.0 if gating.get("allow_neg_eigval") else 1.0)
    if (bound := gating.get("lower_bound")) is None:
        g = gated_delta.compute_g(A_log, a, dt_bias)
    else:
        g = gated_delta.compute_lower_bound_g(A_log, a, dt_bias, bound)
    batch, steps, _, dk = q.shape
    heads, dv = v.shape[-2:]
    if state is None:
        state = mx.zeros((batch, heads, dv, dk), dtype=mx.float32)
    flat = ext.gated_delta(q, k, v, g, beta, state, mask)
    kept = batch * heads * dv * dk
    return flat[kept:].reshape(batch, steps, heads, dv), flat[:kept].reshape(state.shape)


# Each name: what it may hold before (mlx-lm's function, or the engine's own dispatcher where
# a quantized KV cache installed it first), and the kernels' dispatcher.
_ROUTES = {
    "scaled_dot_product_attention": (
        (base.scaled_dot_product_attention, kv_attention.attention),
        attention,
    ),
    "swiglu": ((MLX_SWIGLU,), swiglu),
    "gated_delta_update": ((MLX_GATED_DELTA,), gated_delta_update),
}


def install(model: nn.Module) -> Counter:
    """Routes the functions of every module defining one of the model's layers; idempotent."""
    routed = Counter()
    names = {type(m).__module__ for _, m in model.named_modules()}
    for module in filter(None, (sys.modules.get(name) for name in names)):
        for name, (originals, replacement) in _ROUTES.items():
            current = getattr(module, name, None)
            if current in originals:
                setattr(module, name, replacement)
            if current in (*originals, replacement):
                routed[name] += 1
    return routed
