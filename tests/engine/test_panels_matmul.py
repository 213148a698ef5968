"""The quantized matmul's float panels (kernels/src/panels_avx2.cpp: weights dequantized to
float32 panels of 16 columns, rows six at a time by FMA), what auto runs many rows with on
AVX2 without VNNI: MLX's float product to float32 rounding, a row computed alike in any batch
and on any number of threads, and auto's choice by row count."""

from __future__ import annotations

import cpu_kernels as ck
import mlx.core as mx
import pytest

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

ISAS = [isa for isa in ("avx512", "avx2", "generic") if ck.use_isa(isa)]
# Instruction sets with panels here (AVX2, and AVX-512 without VNNI; an AVX-512 VNNI machine
# still runs them under avx2).
PANEL_ISAS = [isa for isa in ISAS if ck.use_isa(isa) and ck.panels_isa() != "none"]
ck.use_isa(ISAS[0])


@pytest.fixture(params=PANEL_ISAS)
def panels(request):
    assert ck.use_isa(request.param)
    ck.use_int8("panels")
    yield request.param
    ck.use_int8("auto")
    ck.use_isa(ISAS[0])
    ck.set_threads(0)


def quantized(n: int, k: int, bits: int, group: int, dtype: mx.Dtype, seed: int = 0):
    key = mx.random.key(seed)
    w, s, b = mx.quantize(mx.random.normal((n, k), key=key), group, bits)
    return w, s.astype(dtype), b.astype(dtype)


def relative(ours: mx.array, theirs: mx.array) -> float:
    return mx.abs(ours - theirs).max().item() / (mx.abs(theirs).max().item() + 1e-12)


CASES = [  # rows (blocks of 6 and what is left), features, columns (panels of 16 and a tail)
    (m, k, n, bits, group, dtype)
    for m, k, n in ((1, 64, 16), (5, 128, 33), (6, 256, 1), (17, 384, 100), (64, 512, 48))
    for bits in (4, 8)
    for group, dtype in ((32, mx.float16), (64, mx.bfloat16), (128, mx.float32))
    if k % group == 0
]


@pytest.mark.parametrize("m,k,n,bits,group,dtype", CASES)
def test_panels_match_mlx_float_product(panels, m, k, n, bits, group, dtype):
    w, s, b = quantized(n, k, bits, group, dtype, seed=m + k)
    x = mx.random.normal((m, k), key=mx.random.key(m))
    ours = ck.quantized_matmul(x, w, s, b, group, bits)
    theirs = mx.quantized_matmul(
        x, w, s.astype(mx.float32), b.astype(mx.float32), group_size=group, bits=bits
    )
    assert ours.shape == (m, n) and ours.dtype == mx.float32
    assert relative(ours, theirs) < 2e-6  # float32 sums in another order, nothing rounded


def test_a_row_is_computed_alike_in_any_batch_and_on_any_threads(panels):
    """Speculative verification and batched decoding rely on it: a row's result must not
    depend on its neighbours (each output is one FMA chain over k in order)."""
    w, s, b = quantized(200, 1024, 4, 32, mx.float16)
    x = mx.random.normal((37, 1024), key=mx.random.key(3))
    whole = ck.quantized_matmul(x, w, s, b, 32, 4)
    for rows in (slice(0, 1), slice(5, 17), slice(30, 37)):
        assert mx.array_equal(ck.quantized_matmul(x[rows], w, s, b, 32, 4), whole[rows])
    ck.set_threads(1)
    assert mx.array_equal(ck.quantized_matmul(x, w, s, b, 32, 4), whole)


def test_auto_takes_the_panels_from_sixteen_rows_on_avx2():
    """Below 16 rows the float rows path was faster (bench/kernels.py at 2048x8192), above
    it the panels (560 rows: 130 ms against 206 for the integer tiles, 290 for float rows)."""
    if not ck.use_isa("avx2"):
        pytest.fail("an x86 machine without AVX2 cannot run these kernels' tests")
    try:
        w, s, b = quantized(48, 2048, 4, 32, mx.float16)
        for rows, forced in ((16, "panels"), (8, "never")):
            x = mx.random.normal((rows, 2048), key=mx.random.key(rows))
            ck.use_int8(forced)
            expected = ck.quantized_matmul(x, w, s, b, 32, 4)
            ck.use_int8("auto")
            assert mx.array_equal(ck.quantized_matmul(x, w, s, b, 32, 4), expected), rows
    finally:
        ck.use_int8("auto")
        ck.use_isa(ISAS[0])
