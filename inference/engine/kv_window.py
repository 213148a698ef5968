"""Sliding-window caches in 8 or 4 bits: mlx-lm's RotatingKVCache over packed K/V.

A window's bookkeeping (growing, trimming to the window, rotating the write position, putting
positions back in order, left padding and merging rows) only ever moves positions along axis 2;
it never looks at what a position holds. So a packed window is three of mlx-lm's own rotating
caches kept in step, one per part of MLX's affine layout (codes, scales, biases), each fed the
same positions: every operation applies to the three alike, and K/V come back as the
(codes, scales, biases) tuples attention reads packed (engine/attention.py, the CPU kernel).
The batch form does the same over three of mlx-lm's BatchRotatingKVCaches.
"""

from __future__ import annotations

import copy
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import BatchRotatingKVCache, RotatingKVCache, _BaseCache

from inference.engine.kv_quantized import Packed, quantize

PARTS = 3  # codes, scales, biases


class _InStep(_BaseCache):
    """Three caches of one class in step: `caches[0]` answers for all of them."""

    caches: list[Any]
    group_size: int
    bits: int

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[Packed, Packed]:
        packed_keys = quantize(keys, self.group_size, self.bits)
        packed_values = quantize(values, self.group_size, self.bits)
        fetched = [
            c.update_and_fetch(k, v)
            for c, k, v in zip(self.caches, packed_keys, packed_values, strict=True)
        ]
        return tuple(f[0] for f in fetched), tuple(f[1] for f in fetched)

    def keys_and_values(self) -> tuple[Packed, Packed]:
        """What the cache holds, as update_and_fetch hands it (Gemma 3n's KV-shared layers
        read an earlier layer's cache this way)."""
        pairs = [c.keys_and_values() for c in self.caches]
        return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)

    @property
    def keys(self) -> Packed | None:
        first = self.caches[0].keys
        return None if first is None else tuple(c.keys for c in self.caches)

    @property
    def values(self) -> Packed | None:
        first = self.caches[0].values
        return None if first is None else tuple(c.values for c in self.caches)

    @property
    def offset(self) -> Any:
        return self.caches[0].offset

    @property
    def max_size(self) -> int:
        return self.caches[0].max_size

    def make_mask(self, *args: Any, **kwargs: Any) -> Any:
        return self.caches[0].make_mask(*args, **kwargs)

    def size(self) -> int:
        return self.caches[0].size()

    def empty(self) -> bool:
        return self.caches[0].empty()

    def is_trimmable(self) -> bool:
        return self.caches[0].is_trimmable()

    def trim(self, n: int) -> int:
        trimmed = [c.trim(n) for c in self.caches]  # every part, alike
        return trimmed[0]

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.caches)

    @property
    def state(self) -> tuple[Any, ...]:
        return tuple(c.state for c in self.caches)

    @state.setter
    def state(self, v: tuple[Any, ...]) -> None:
        self.caches = [self.part.from_state(s) for s in v]

    @property
    def meta_state(self) -> tuple[str, ...]:
        # mlx-lm's rotating caches keep their sizes in `state` itself.
        return str(self.group_size), str(self.bits)

    @meta_state.setter
    def meta_state(self, v: tuple[str, ...]) -> None:
        self.group_size, self.bits = int(v[0]), int(v[1])

    def __copy__(self) -> _InStep:
        twin = type(self).__new__(type(self))
        twin.__dict__.update(self.__dict__)
        twin.caches = [copy.copy(c) for c in self.caches]
        return twin


class QuantizedWindowKV(_InStep):
    """One sequence's sliding window, kept packed."""

    part = RotatingKVCache

    def __init__(self, max_size: int, group_size: int, bits: int, keep: int = 0) -> None:
        self.group_size, self.bits = group_size, bits
        self.caches = [RotatingKVCache(max_size, keep) for _ in range(PARTS)]

    @classmethod
    def merge(cls, caches: list[QuantizedWindowKV]) -> QuantizedBatchWindowKV:
        return QuantizedBatchWindowKV.of(
            [BatchRotatingKVCache.merge([c.caches[i] for c in caches]) for i in range(PARTS)],
            caches[0],
        )


class QuantizedBatchWindowKV(_InStep):
    """Several sequences' sliding windows, kept packed: BatchRotatingKVCache's rows."""

    part = BatchRotatingKVCache

    def __init__(self, max_size: int, left_padding: list[int], group_size: int, bits: int):
        self.group_size, self.bits = group_size, bits
        self.caches = [BatchRotatingKVCache(max_size, left_padding) for _ in range(PARTS)]

    @classmethod
    def of(cls, caches: list[Any], like: _InStep) -> QuantizedBatchWindowKV:
        batch = cls.__new__(cls)
        batch.group_size, batch.bits, batch.caches = like.group_size, like.bits, caches
        return batch

    @property
    def left_padding(self) -> mx.array:
        return self.caches[0].left_padding

    def prepare(self, **kwargs: Any) -> None:
        for cache in self.caches:
            cache.prepare(**kwargs)

    def finalize(self) -> None:
        for cache in self.caches:
            cache.finalize()

    def filter(self, batch_indices: list[int]) -> None:
        for cache in self.caches:
            cache.filter(batch_indices)

    def extend(self, other: QuantizedBatchWindowKV) -> None:
        for mine, theirs in zip(self.caches, other.caches, strict=True):
            mine.extend(theirs)

    def extract(self, idx: int) -> QuantizedWindowKV:
        row = QuantizedWindowKV.__new__(QuantizedWindowKV)
        row.group_size, row.bits = self.group_size, self.bits
        row.caches = [c.extract(idx) for c in self.caches]
        return row
