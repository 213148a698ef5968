"""Attention and SwiGLU as mlx-lm's model code calls them, routed to the kernels.

mlx-lm's models call module-level functions (`scaled_dot_product_attention` from
models/base.py, `swiglu` from models/activations.py) rather than layers, so the swap happens
in the model's own module: each name that still holds mlx-lm's function is pointed at a
dispatcher that uses the kernel for float32 inputs it handles and mlx-lm's function otherwise
(kernels turned off since, a float16 model in the same process, quantized KV caches,
attention sinks).
"""

from __future__ import annotations

import sys
from collections import Counter

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import activations, base

from inference.engine.cpu.ext import ext
from inference.engine.cpu.status import in_use


def attention(queries, keys, values, cache=None, scale=1.0, mask=None, sinks=None):
    plain_mask = mask is None or isinstance(mask, mx.array) or mask == "causal"
    if (
        in_use()
        and queries.dtype == mx.float32
        and sinks is None
        and not hasattr(cache, "bits")
        and plain_mask
        and queries.shape[2] <= keys.shape[2]
    ):
        return ext.attention(queries, keys, values, scale=scale, mask=mask)
    return base.scaled_dot_product_attention(
        queries, keys, values, cache=cache, scale=scale, mask=mask, sinks=sinks
    )


def swiglu(gate, x):
    if in_use() and gate.dtype == mx.float32 and gate.shape == x.shape:
        return ext.swiglu(gate, x)
    return activations.swiglu(gate, x)


_ROUTES = {
    "scaled_dot_product_attention": (base.scaled_dot_product_attention, attention),
    "swiglu": (activations.swiglu, swiglu),
}


def install(model: nn.Module) -> Counter:
    """Routes the functions of every module defining one of the model's layers; idempotent."""
    routed = Counter()
    names = {type(m).__module__ for _, m in model.named_modules()}
    for module in filter(None, (sys.modules.get(name) for name in names)):
        for name, (original, replacement) in _ROUTES.items():
            current = getattr(module, name, None)
            if current is original:
                setattr(module, name, replacement)
            if current in (original, replacement):
                routed[name] += 1
    return routed
