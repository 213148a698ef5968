"""Sliding windows in 8 and 4 bits (engine/kv_window.py): three of mlx-lm's rotating caches in
step, one per part of the packed layout. Through every batch operation (merge, a prefill chunk,
a decode step past the window, extend, filter, extract) a packed window holds what a float16
window holds, to the quantization's error, at the same positions; a prefix-cache twin writes
alone."""

from __future__ import annotations

import mlx.core as mx
import pytest

from inference.engine.kv import Float16RotatingKVCache
from inference.engine.kv_window import QuantizedBatchWindowKV, QuantizedWindowKV
from inference.engine.prefixes import share

pytestmark = pytest.mark.database_independent

WINDOW = 8
TOLERANCE = {8: 0.05, 4: 0.6}  # the largest error of a group's step, on N(0, 1) values


def kv(n: int, seed: int, rows: int = 1) -> tuple[mx.array, mx.array]:
    mx.random.seed(seed)
    return mx.random.normal((rows, 2, n, 64)), mx.random.normal((rows, 2, n, 64))


def widened(packed: tuple, bits: int) -> mx.array:
    return mx.dequantize(*packed, group_size=64, bits=bits)


def agree(packed_cache, float_cache, bits: int) -> bool:
    """Same positions, same offsets, values within the quantization's error."""
    (pk, pv), (fk, fv) = packed_cache.keys_and_values(), float_cache.keys_and_values()
    if widened(pk, bits).shape != fk.shape:
        return False
    close = all(
        mx.allclose(widened(p, bits), f.astype(mx.float32), atol=TOLERANCE[bits]).item()
        for p, f in ((pk, fk), (pv, fv))
    )
    return close and mx.array_equal(mx.array(packed_cache.offset), mx.array(float_cache.offset))


def both(bits: int, lengths: tuple[int, ...]) -> tuple[list, list]:
    """Packed and float16 windows fed the same prompts (one past the window)."""
    packed, plain = [], []
    for seed, n in enumerate(lengths):
        p, f = QuantizedWindowKV(WINDOW, 64, bits), Float16RotatingKVCache(max_size=WINDOW)
        for cache in (p, f):
            cache.update_and_fetch(*kv(n, seed))
        packed.append(p)
        plain.append(f)
    return packed, plain


@pytest.mark.parametrize("bits", [8, 4])
def test_a_packed_window_holds_what_a_float_window_holds_through_the_batch(bits):
    packed, plain = both(bits, (5, 11))
    assert all(agree(p, f, bits) for p, f in zip(packed, plain, strict=True))
    batch, reference = QuantizedWindowKV.merge(packed), Float16RotatingKVCache.merge(plain)
    assert type(batch) is QuantizedBatchWindowKV and agree(batch, reference, bits)
    for step in range(WINDOW + 2):  # decode steps, wrapping the window
        for cache in (batch, reference):
            cache.update_and_fetch(*kv(1, 100 + step, rows=2))
        assert agree(batch, reference, bits)
    masks = [c.make_mask(3, window_size=WINDOW, return_array=True) for c in (batch, reference)]
    assert mx.array_equal(*masks).item()
    extra, extra_reference = both(bits, (3,))
    batch.extend(QuantizedWindowKV.merge(extra))
    reference.extend(Float16RotatingKVCache.merge(extra_reference))
    assert agree(batch, reference, bits)
    batch.filter([0, 2])
    reference.filter([0, 2])
    assert agree(batch, reference, bits)
    row, reference_row = batch.extract(1), reference.extract(1)
    assert type(row) is QuantizedWindowKV and agree(row, reference_row, bits)
    assert row.offset == reference_row.offset == 3


def test_a_prefix_cache_twin_writes_alone():
    (window,), _ = both(8, (11,))
    before = [mx.array(x) for x in window.keys]
    twin = share(window)
    twin.update_and_fetch(*kv(1, 7))
    assert twin.offset == window.offset + 1
    assert all(mx.array_equal(a, b).item() for a, b in zip(window.keys, before, strict=True))


def test_its_state_rebuilds_it():
    (window,), _ = both(4, (11,))
    rebuilt = QuantizedWindowKV.from_state(window.state)
    rebuilt.meta_state = window.meta_state
    assert (rebuilt.group_size, rebuilt.bits, rebuilt.offset) == (64, 4, window.offset)
    assert all(
        mx.array_equal(a, b).item()
        for mine, theirs in zip(rebuilt.keys_and_values(), window.keys_and_values(), strict=True)
        for a, b in zip(mine, theirs, strict=True)
    )
