"""How a chat model's KV cache is kept: the catalog's `kv_cache` made into cache layers.

- "auto": float16 when the model computes in float32 on the CPU with the CPU kernels (its K/V
  would otherwise be float32, twice llama.cpp's f16), else as the model computes them
  ("native").
- "float16": float16 K/V everywhere: mlx-lm's cache classes, casting what comes in, and
  keeping their float16 class through merge, extend, filter and extract.
- "8bit" / "4bit": MLX's affine quantized layout, group 64 (kv_quantized.py), for plain
  KVCache layers; other layers that hold K/V (sliding windows, CacheList) stay float16.

Layers that hold no K/V (ArraysCache of hybrid models) are left as the model makes them.
"""

from __future__ import annotations

import logging
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.models.cache import (
    ArraysCache,
    BatchKVCache,
    BatchRotatingKVCache,
    CacheList,
    KVCache,
    RotatingKVCache,
    make_prompt_cache,
)

from inference.engine.kv_quantized import GROUP_SIZE, QuantizedKV

log = logging.getLogger(__name__)

NATIVE = "native"  # engine-only kind: K/V as the model computes them (the float32 reference)
BITS = {"8bit": 8, "4bit": 4}
KINDS = (NATIVE, "float16", *BITS)
# What "auto" is on a CPU computing in float32: half the memory, and the attention kernel
# (cpu/hooks.py) reads float16 K/V itself. Without the kernels MLX's own attention widens the
# whole cache to float32 on every call (about 5x its float32 time at 2k tokens): NATIVE there.
CPU_AUTO = "float16"
_logged: set[str] = set()


def _once(message: str, *args: object) -> None:
    text = message % args
    if text not in _logged:
        _logged.add(text)
        log.info(text)


def _half(x: mx.array) -> mx.array:
    return x if x.dtype == mx.float16 else x.astype(mx.float16)


def _retype(cache: Any, cls: type) -> Any:
    """mlx-lm's own instance as our subclass (same attributes, no copy)."""
    cache.__class__ = cls
    return cache


class Float16KVCache(KVCache):
    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        # mlx-lm allocates its buffers in the incoming dtype: cast first, they are float16.
        return super().update_and_fetch(_half(keys), _half(values))

    @classmethod
    def merge(cls, caches: list[Any]) -> Float16BatchKVCache:
        return Float16BatchKVCache.merge(caches)


class Float16BatchKVCache(BatchKVCache):
    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        return super().update_and_fetch(_half(keys), _half(values))

    @classmethod
    def merge(cls, caches: list[Any]) -> Float16BatchKVCache:
        if all(c.size() == 0 for c in caches):  # mlx-lm makes a plain BatchKVCache here
            return cls([0] * len(caches))
        return super().merge(caches)

    def extract(self, idx: int) -> Float16KVCache:
        return _retype(super().extract(idx), Float16KVCache)


class Float16RotatingKVCache(RotatingKVCache):
    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        return super().update_and_fetch(_half(keys), _half(values))

    @classmethod
    def merge(cls, caches: list[Any]) -> Float16BatchRotatingKVCache:
        return Float16BatchRotatingKVCache.merge(caches)


class Float16BatchRotatingKVCache(BatchRotatingKVCache):
    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        return super().update_and_fetch(_half(keys), _half(values))

    def extract(self, idx: int) -> Float16RotatingKVCache:
        return _retype(super().extract(idx), Float16RotatingKVCache)


FLOAT16 = {KVCache: Float16KVCache, RotatingKVCache: Float16RotatingKVCache}
_BATCH_OF = {KVCache: BatchKVCache, Float16KVCache: Float16BatchKVCache}


def batch_of_one(layer: Any) -> Any:
    """One sequence's cache layer as a batch of one. A plain K/V layer hands its arrays over
    as they are: merge would copy them into exact-size arrays, which the first decode step
    then grows (a second copy); at 5k tokens each costs tens of ms of a next turn. Its arrays
    are this sequence's alone (a prefix-cache twin's grew into new ones while its new tokens
    were read; MLX copies any array still shared before writing into it)."""
    batch_type = _BATCH_OF.get(type(layer))
    if batch_type is None or layer.keys is None:
        return type(layer).merge([layer])
    batch = batch_type([0])
    batch.keys, batch.values = layer.keys, layer.values
    batch.offset += layer.offset
    batch._idx = layer.offset
    return batch


def computes_in_float32(loaded: Any) -> bool:
    """Whether the model's activations (so its K/V) are float32: on a CPU with the kernels
    (their layers take and give float32), converted to float32, or stored so."""
    if loaded.kernels or loaded.compute_format == "float32":
        return True
    return _float_dtype(loaded.model) == mx.float32


def _float_dtype(model: nn.Module) -> mx.Dtype | None:
    for _, array in tree_flatten(model.parameters()):
        if mx.issubdtype(array.dtype, mx.floating):
            return array.dtype
    return None


def resolve(loaded: Any) -> str:
    """The kind of KV cache `loaded` gets: one of KINDS."""
    requested = loaded.spec.kv_cache
    if requested in KINDS:
        return requested
    if requested != "auto":
        _once("unknown kv_cache %r for %s: auto", requested, loaded.spec.model_id)
    on_cpu = mx.default_device() == mx.cpu
    kernels = getattr(loaded, "kernels", False)  # their attention reads float16 K/V itself
    return CPU_AUTO if on_cpu and kernels and computes_in_float32(loaded) else NATIVE


def head_dims(model: nn.Module) -> set[int]:
    """The attention head sizes the decoder layers declare (empty when none says): those
    make_prompt_cache makes caches for (a vision model's tower has heads of its own)."""
    dims = set()
    modules = (m for block in getattr(model, "layers", []) for _, m in block.named_modules())
    for module in modules:
        for name in ("head_dim", "v_head_dim", "qk_head_dim"):
            value = getattr(module, name, None)
            if isinstance(value, int):
                dims.add(value)
    return dims


def quantizable(model: nn.Module) -> bool:
    dims = head_dims(model)
    return bool(dims) and all(d % GROUP_SIZE == 0 for d in dims)


class KVFormat:
    """Makes one sequence's cache layers in one kind, for one model."""

    def __init__(self, model: nn.Module, kind: str) -> None:
        self.model = model
        self.kind = kind
        self.bits = BITS.get(kind)
        if self.bits and not quantizable(model):
            _once(
                "KV cache %s needs attention heads a multiple of %d wide (the model's: %s): "
                "float16 instead",
                kind,
                GROUP_SIZE,
                sorted(head_dims(model)) or "unknown",
            )
            self.kind, self.bits = "float16", None

    @classmethod
    def of(cls, loaded: Any) -> KVFormat:
        made = cls(loaded.model, resolve(loaded))
        _once("%s: KV cache %s (%s asked)", loaded.spec.model_id, made.kind, loaded.spec.kv_cache)
        return made

    def make(self) -> list[Any]:
        layers = make_prompt_cache(self.model)
        if self.kind == NATIVE:
            return layers
        return [self.convert(layer) for layer in layers]

    def convert(self, layer: Any) -> Any:
        """A fresh layer of mlx-lm's as this kind keeps it."""
        if self.bits and type(layer) is KVCache:
            return QuantizedKV(GROUP_SIZE, self.bits)
        if isinstance(layer, CacheList):
            layer.caches = tuple(self._float16(c) for c in layer.caches)
            return layer
        return self._float16(layer)

    def _float16(self, layer: Any) -> Any:
        cls = FLOAT16.get(type(layer))
        if cls is not None:
            if self.bits and cls is not Float16KVCache:
                _once("KV cache %s: %s layers stay float16", self.kind, type(layer).__name__)
            return _retype(layer, cls)
        if not isinstance(layer, ArraysCache):  # ArraysCache holds state, not K/V
            _once(
                "KV cache %s: %s layers kept as the model makes them",
                self.kind,
                type(layer).__name__,
            )
        return layer
