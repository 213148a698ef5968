"""Quantized KV caches in MLX's affine layout, one sequence's and a batch's.

K and V are kept as mx.quantize leaves them along the head dimension: (packed uint32, scales,
biases) per position, as mlx-lm's QuantizedKVCache keeps them, so mlx-lm's attention takes its
quantized path (`bits` and `group_size` on the cache) and a CPU kernel can read the same
tuples. Scales and biases are float16 when the model computes in float32 (the CPU): float32
ones would cost 8 bytes per 64 values instead of 4. mlx-lm 0.32.2 has no batched quantized
cache; `BatchQuantizedKVCache` is its `BatchKVCache` (left-padded rows, right-padded prefill
chunks rolled left by `finalize`) over packed tuples.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mlx.core as mx
from mlx_lm.models.base import create_causal_mask
from mlx_lm.models.cache import QuantizedKVCache, _BaseCache, dynamic_roll

GROUP_SIZE = 64
Packed = tuple[mx.array, mx.array, mx.array]  # (packed uint32, scales, biases)


def scale_dtype(dtype: mx.Dtype) -> mx.Dtype:
    """What scales and biases are kept in: float16 for float32 activations, else theirs."""
    return mx.float16 if dtype == mx.float32 else dtype


def narrowed(x: mx.array) -> mx.array:
    return x.astype(scale_dtype(x.dtype))


def quantize(x: mx.array, group_size: int, bits: int) -> Packed:
    return tuple(mx.quantize(narrowed(x), group_size=group_size, bits=bits))


def widest_group(*widths: int) -> int | None:
    """The widest group mx.quantize takes that divides every width (None: none does): 64
    where it can, 32 for an MLA rope part 32 wide, say."""
    for group in (GROUP_SIZE, 32):
        if all(w % group == 0 for w in widths):
            return group
    return None


def dequantized(packed: Packed, group_size: int, bits: int) -> mx.array:
    return mx.dequantize(*packed, group_size=group_size, bits=bits)


def each(fn: Callable[[mx.array], mx.array], packed: Packed) -> Packed:
    return tuple(fn(x) for x in packed)


def zeros(prefix: tuple[int, ...], like: Packed) -> Packed:
    """Empty positions shaped (*prefix, last axis of each of `like`'s arrays)."""
    return tuple(mx.zeros((*prefix, x.shape[-1]), dtype=x.dtype) for x in like)


class QuantizedKV(QuantizedKVCache):
    """One sequence's: mlx-lm's QuantizedKVCache with float16 scales for float32 inputs, and
    what the engine's batching asks of a cache (size, merge into a batch)."""

    def __init__(self, group_size: int = GROUP_SIZE, bits: int = 8) -> None:
        super().__init__(group_size=group_size, bits=bits)

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[Packed, Packed]:
        # mlx-lm allocates its scales in the incoming dtype: narrowed first, they are float16.
        return super().update_and_fetch(narrowed(keys), narrowed(values))

    def size(self) -> int:
        return self.offset

    @property
    def meta_state(self) -> tuple[str, ...]:
        return str(self.offset), str(self.group_size), str(self.bits)

    @classmethod
    def merge(cls, caches: list[QuantizedKV]) -> BatchQuantizedKVCache:
        return BatchQuantizedKVCache.merge(caches)


class BatchQuantizedKVCache(_BaseCache):
    """Several sequences' quantized KV, left-padded to a common end as BatchKVCache's are."""

    step = 256
    single = QuantizedKV  # what extract() makes of a row

    def __init__(self, left_padding: list[int], group_size: int = GROUP_SIZE, bits: int = 8):
        self.keys: Packed | None = None
        self.values: Packed | None = None
        self.left_padding = mx.array(left_padding)
        self.offset = mx.array([-n for n in left_padding])
        self._idx = 0
        self._right_padding: mx.array | None = None
        self.group_size, self.bits = group_size, bits

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[Packed, Packed]:
        n, prev = keys.shape[2], self._idx
        new_keys = quantize(keys, self.group_size, self.bits)
        new_values = quantize(values, self.group_size, self.bits)
        if self.keys is None or prev + n > self.keys[0].shape[2]:
            self._grow(new_keys, new_values, n)
        self.offset = self.offset + n
        self._idx += n
        for stored, new in ((self.keys, new_keys), (self.values, new_values)):
            for array, part in zip(stored, new, strict=True):
                array[..., prev : self._idx, :] = part
        return self.keys_and_values()

    def _grow(self, keys: Packed, values: Packed, n: int) -> None:
        """Room for `n` more positions, in whole steps (as BatchKVCache grows)."""
        batch, heads = keys[0].shape[:2]
        room = (batch, heads, (self.step + n - 1) // self.step * self.step)
        if self.keys is None:
            self.keys, self.values = zeros(room, keys), zeros(room, values)
            return
        prev = self._idx

        def grown(stored: Packed) -> Packed:
            kept = each(lambda x: x[..., :prev, :], stored)
            return tuple(
                mx.concatenate([x, z], axis=2) for x, z in zip(kept, zeros(room, kept), strict=True)
            )

        self.keys, self.values = grown(self.keys), grown(self.values)

    def keys_and_values(self) -> tuple[Packed, Packed]:
        idx = self._idx
        return each(lambda x: x[..., :idx, :], self.keys), each(
            lambda x: x[..., :idx, :], self.values
        )

    def prepare(self, *, left_padding=None, lengths=None, right_padding=None) -> None:
        """As BatchKVCache's: left padding before anything is stored, right padding (a
        prefill chunk's shorter rows) rolled away by finalize()."""
        if left_padding is not None:
            if self.keys is not None:
                raise ValueError("left padding can only be added to an empty cache")
            left_padding = mx.array(left_padding)
            self.left_padding += left_padding
            self.offset = self.offset - left_padding
        if right_padding is not None and max(right_padding) > 0:
            self._right_padding = mx.array(right_padding)

    def finalize(self) -> None:
        if self._right_padding is None:
            return
        shifts = self._right_padding[:, None]
        self.keys = each(lambda x: dynamic_roll(x, shifts, axis=2), self.keys)
        self.values = each(lambda x: dynamic_roll(x, shifts, axis=2), self.values)
        self.offset = self.offset - self._right_padding
        self.left_padding = self.left_padding + self._right_padding
        self._right_padding = None

    @property
    def state(self) -> tuple[Any, ...]:
        """The arrays, cut to the positions held (meta_state has the rest)."""
        keys, values = self.keys_and_values() if self.keys is not None else (None, None)
        return keys, values, self.offset, self.left_padding

    @state.setter
    def state(self, v: tuple[Any, ...]) -> None:
        self.keys, self.values, self.offset, self.left_padding = v
        self._idx = 0 if self.keys is None else self.keys[0].shape[2]
        self._right_padding = None

    @property
    def meta_state(self) -> tuple[str, ...]:
        return str(self._idx), str(self.group_size), str(self.bits)

    @meta_state.setter
    def meta_state(self, v: tuple[str, ...]) -> None:
        self._idx, self.group_size, self.bits = map(int, v)

    def is_trimmable(self) -> bool:
        return True

    def trim(self, n: int) -> int:
        n = min(self._idx, n)
        self._idx -= n
        self.offset = self.offset - n
        return n

    def make_mask(self, N: int, return_array: bool = False, **kwargs: Any) -> mx.array:
        return create_causal_mask(N, offset=self._idx, left_padding=self.left_padding, **kwargs)

    def size(self) -> int:
        return self._idx

    def empty(self) -> bool:
        return self.keys is None

    @property
    def nbytes(self) -> int:
        if self.keys is None:
            return 0
        return sum(x.nbytes for x in (*self.keys, *self.values))

    def filter(self, batch_indices: list[int]) -> None:
        """Keeps rows `batch_indices` (in place), dropping the padding every row now has."""
        if self.keys is not None:
            self.keys = each(lambda x: x[batch_indices], self.keys)
            self.values = each(lambda x: x[batch_indices], self.values)
        self.offset = self.offset[batch_indices]
        self.left_padding = self.left_padding[batch_indices]
        shift = min(self.left_padding.tolist())
        if shift > 0:
            if self.keys is not None:
                self.keys = each(lambda x: x[..., shift:, :], self.keys)
                self.values = each(lambda x: x[..., shift:, :], self.values)
            self._idx -= shift
            self.left_padding = self.left_padding - shift

    def extend(self, other: BatchQuantizedKVCache) -> None:
        """Appends `other`'s rows (in place), both right-aligned at the longer one's end."""
        if self.keys is None and other.keys is None:
            self.left_padding = mx.concatenate([self.left_padding, other.left_padding])
            self.offset = mx.concatenate([self.offset, other.offset])
            return
        like = self if self.keys is not None else other
        end = max(self._idx, other._idx)
        width = max(c.keys[0].shape[2] for c in (self, other) if c.keys is not None)
        mine, theirs = self._aligned(like, end, width), other._aligned(like, end, width)
        self.keys = tuple(mx.concatenate(p) for p in zip(mine[0], theirs[0], strict=True))
        self.values = tuple(mx.concatenate(p) for p in zip(mine[1], theirs[1], strict=True))
        self.offset = mx.concatenate([self.offset, other.offset])
        self.left_padding = mx.concatenate([mine[2], theirs[2]])
        self._idx = end

    def _aligned(
        self, like: BatchQuantizedKVCache, end: int, width: int
    ) -> tuple[Packed, Packed, mx.array]:
        """This cache's K, V and left padding, its positions ending at `end` of `width`."""
        rows, left = self.offset.shape[0], end - self._idx
        if self.keys is None:
            heads = like.keys[0].shape[1]
            keys, values = zeros((rows, heads, 0), like.keys), zeros((rows, heads, 0), like.values)
        else:
            keys, values = self.keys, self.values
        right = width - keys[0].shape[2] - left
        if right < 0:
            keys = each(lambda x: x[..., :right, :], keys)
            values = each(lambda x: x[..., :right, :], values)
            right = 0
        if left or right:
            pad = [(0, 0), (0, 0), (left, right), (0, 0)]
            keys, values = (
                each(lambda x: mx.pad(x, pad), keys),
                each(lambda x: mx.pad(x, pad), values),
            )
        return keys, values, self.left_padding + left

    def extract(self, idx: int) -> QuantizedKV:
        """Row `idx` as one sequence's cache (its own arrays, cut to what it holds)."""
        padding = self.left_padding.tolist()[idx]
        cut = slice(padding, self._idx)
        cache = self.single(self.group_size, self.bits)
        cache.keys = each(lambda x: mx.contiguous(x[idx : idx + 1, :, cut]), self.keys)
        cache.values = each(lambda x: mx.contiguous(x[idx : idx + 1, :, cut]), self.values)
        cache.offset = self._idx - padding
        return cache

    @classmethod
    def merge(cls, caches: list[QuantizedKV]) -> BatchQuantizedKVCache:
        """One sequence's caches as a batch, each right-aligned at the longest one's end."""
        lengths = [c.size() for c in caches]
        longest = max(lengths)
        padding = [longest - n for n in lengths]
        batch = cls(padding, caches[0].group_size, caches[0].bits)
        if longest == 0:
            return batch
        first = next(c for c in caches if c.keys is not None)
        heads = first.keys[0].shape[1]
        keys = zeros((len(caches), heads, longest), first.keys)
        values = zeros((len(caches), heads, longest), first.values)
        for i, (pad, cache) in enumerate(zip(padding, caches, strict=True)):
            if cache.keys is None:
                continue
            for stored, theirs in ((keys, cache.keys), (values, cache.values)):
                for array, part in zip(stored, theirs, strict=True):
                    array[i : i + 1, :, pad:] = part[..., : cache.offset, :]
        batch.keys, batch.values = keys, values
        batch.offset = batch.offset + longest
        batch._idx = longest
        return batch


class DequantizedKV(QuantizedKV):
    """Kept quantized, handed to the layer as arrays: for attention whose model code works on
    its K/V itself instead of passing them to attention (MLA: DeepSeek, Kimi, GLM-4.7-Flash
    split the cached latent and its rope part and multiply them). The cache holds 8 or 4
    bits a value; each step widens what it attends over for that step only."""

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        packed = super().update_and_fetch(keys, values)
        return tuple(dequantized(p, self.group_size, self.bits) for p in packed)

    @classmethod
    def merge(cls, caches: list[QuantizedKV]) -> DequantizedBatchKVCache:
        return DequantizedBatchKVCache.merge(caches)


class DequantizedBatchKVCache(BatchQuantizedKVCache):
    """A batch of DequantizedKV rows: stored packed, handed to the layer as arrays."""

    single = DequantizedKV

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        packed = super().update_and_fetch(keys, values)
        return tuple(dequantized(p, self.group_size, self.bits) for p in packed)
