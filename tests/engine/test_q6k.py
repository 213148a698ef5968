"""GGUF's Q6_K weights in the CPU kernels' own layout (kernels/src/k6.h): the import's packing
is gguf's dequantization bit for bit, the products (direct path for decode's rows, integer
tiles for prompts) equal the float product of those weights within the activations' rounding,
a row computes alike in any batch, and where the kernels have no path for them (they have one
on AVX-512 VNNI only) the primitives refuse them, saying so: on such a CPU that is what these
tests check instead."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf import quants as gguf_quants

from inference.conversion.gguf_tensors import dequantize_q6k, pack_q6k, q6k_codes
from inference.engine import cpu, q6k
from inference.engine.cpu import layers, q6k_weights
from inference.engine.cpu.ext import ext

pytestmark = pytest.mark.database_independent
VNNI = cpu.kernel_status().q6k is None  # this CPU runs the 6-bit path (else: refusals)


def _raw_blocks(rows: int, columns: int, seed: int) -> np.ndarray:
    """Random Q6_K blocks (210 bytes per 256 weights) with sane float16 super-block scales."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (rows, columns // 256, 210), dtype=np.uint8)
    d = rng.uniform(1e-4, 1e-2, (rows, columns // 256)).astype(np.float16)
    raw[..., 208:210] = d.view(np.uint8).reshape(rows, -1, 2)
    return raw


def _weights(rows: int, columns: int, seed: int = 0):
    """(packed uint32, int8 scales, float16 d) as the import writes them, and the float32
    weights they hold."""
    blocks = _raw_blocks(rows, columns, seed)
    packed = pack_q6k(q6k_codes(blocks).reshape(rows, -1))
    scales = np.ascontiguousarray(blocks[..., 192:208]).view(np.int8).reshape(rows, -1)
    d = np.ascontiguousarray(blocks[..., 208:210]).view(np.float16).reshape(rows, -1)
    arrays = (mx.array(packed.view(np.uint32)), mx.array(scales), mx.array(d))
    return arrays, dequantize_q6k(packed, scales, d)


def test_the_import_layout_holds_ggufs_values_bit_for_bit():
    rows, columns = 6, 768
    blocks = _raw_blocks(rows, columns, seed=3)
    reference = gguf_quants.dequantize(blocks.reshape(rows, -1), GGMLQuantizationType.Q6_K)
    arrays, ours = _weights(rows, columns, seed=3)
    assert np.array_equal(ours, reference.reshape(rows, columns))
    # The engine's MLX reading of the same bytes (embedding rows, float32 twins, 8-bit).
    assert np.array_equal(np.array(q6k.dequantize(*arrays)), ours)
    q, s, b = q6k.to_affine8(*arrays)
    restored = mx.dequantize(q, s.astype(mx.float32), b.astype(mx.float32), group_size=32, bits=8)
    assert np.abs(np.array(restored) - ours).mean() / np.abs(ours).mean() < 0.01


def _product(x: np.ndarray, arrays, x_bytes: int = 2) -> np.ndarray:
    return np.array(ext.quantized_matmul(mx.array(x), *arrays, 16, 6, x_bytes=x_bytes))


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 8, 9, 16, 40])
@pytest.mark.parametrize("x_bytes", [2, 1])
def test_products_equal_the_float_product_within_the_rounding(rows: int, x_bytes: int):
    """Direct path up to 8 rows (16 with one-byte activations), tiles past it; 37 columns
    (not a multiple of the kernels' 4 or 16) over 1,024 features."""
    arrays, w = _weights(37, 1024, seed=rows)
    x = np.random.default_rng(rows).standard_normal((rows, 1024)).astype(np.float32)
    if not VNNI:  # no path for them here: refused (test_without_avx512_vnni_...)
        with pytest.raises(ValueError, match="need AVX-512 VNNI"):
            _product(x, arrays, x_bytes)
        return
    reference = x @ w.T
    error = np.abs(_product(x, arrays, x_bytes) - reference).max() / np.abs(reference).max()
    assert error < (1e-4 if x_bytes == 2 else 1.5e-2), error


def test_a_row_computes_alike_in_any_batch():
    """As the 4- and 8-bit paths: speculative verification decides the path by its plain
    step's row count, and each row's result does not depend on the others."""
    arrays, _ = _weights(64, 512, seed=5)
    x = np.random.default_rng(5).standard_normal((6, 512)).astype(np.float32)
    if not VNNI:
        with pytest.raises(ValueError, match="need AVX-512 VNNI"):
            _product(x, arrays)
        return
    for decided in (6, 12):  # the direct path, then the tiles
        ext.use_int8_rows(decided)
        try:
            together = _product(x, arrays)
            alone = np.concatenate([_product(x[i : i + 1], arrays) for i in range(6)])
        finally:
            ext.use_int8_rows(0)
        assert np.array_equal(together, alone), decided


def test_refusals_name_the_layout():
    arrays, _ = _weights(16, 512)
    x = mx.zeros((1, 512))
    with pytest.raises(ValueError, match="int8, one per 16"):
        ext.quantized_matmul(x, arrays[0], arrays[2], arrays[2], 16, 6)
    with pytest.raises(ValueError, match="group size 32 is not supported"):
        ext.quantized_matmul(x, *arrays, 32, 6)
    with pytest.raises(ValueError, match="for one matrix"):
        stacked = tuple(a[None] for a in arrays)
        ext.gather_quantized_matmul(x, mx.zeros((1,), dtype=mx.int32), *stacked, 16, 6)


def test_without_avx512_vnni_the_kernels_refuse_them():
    """On AVX2 the unpacking made these products slower than MLX's 8-bit (qmm.cpp), so there
    the kernels have no path for them and the engine converts them at load (the status says
    why). Forced here to AVX2 on a VNNI machine; on an AVX2 machine it is the truth."""
    arrays, _ = _weights(16, 512)
    before = ext.isa()
    assert ext.use_isa("avx2")
    try:
        with pytest.raises(ValueError, match="need AVX-512 VNNI"):
            ext.quantized_matmul(mx.zeros((1, 512)), *arrays, 16, 6)
    finally:
        ext.use_isa(before)
    status = cpu.kernel_status()
    if VNNI:
        assert status.direct == "avx512vnni"
    else:
        assert "needs AVX-512 VNNI" in status.q6k


def test_the_x8_layout_holds_the_same_weights():
    """Where the kernels read it (AVX-512 VNNI), the layers lay Q6_K out eight columns at a time
    (k6_vnni.cpp): uint8 weights, so nothing reads them as the kernels' own layout unawares.
    Their float32 weights and embedding rows are the GGUF's still; under mlx_layout() (or
    without VNNI) the layers keep the import's layout."""
    arrays, w = _weights(24, 512, seed=7)
    linear, embedding = q6k_weights.Q6KLinear(*arrays), q6k_weights.Q6KEmbedding(*arrays)
    x8 = VNNI and ext.x8_isa() != "none"
    for layer in (linear, embedding):
        assert (layer["weight"].dtype == mx.uint8) == x8
        assert np.array_equal(np.array(layer.dequantized()), w)
    ids = mx.array([[0, 7, 8, 23], [15, 16, 1, 9]])
    assert np.array_equal(np.array(embedding(ids)), w[np.array(ids)])
    if x8:  # the lookup is one primitive (k6_x8_rows); MLX's reading of the layout agrees
        held = embedding["weight"], embedding["scales"], embedding["biases"]
        rows = q6k_weights.dequantize_x8(*held, ids)
        assert np.array_equal(np.array(rows), w[np.array(ids)])
        assert np.array_equal(
            np.array(ext.k6_x8_rows(*held, ids.astype(mx.uint32))), np.array(rows)
        )
    with layers.mlx_layout():
        assert q6k_weights.Q6KLinear(*arrays)["weight"].dtype == mx.uint32
    uneven = q6k_weights.Q6KLinear(*(a[:20] for a in arrays))  # 20 columns: not a block of 8
    assert uneven["weight"].dtype == mx.uint32


@pytest.mark.parametrize("x_bytes", [2, 1])
def test_products_over_the_x8_layout_equal_the_kernels_layout(x_bytes: int):
    """The direct path over x8 (1-24 rows, 32 with one-byte activations) adds in another order:
    within float32's rounding of its twin; the tiles past it read the gathered columns bit for
    bit. Rows of a batch compute alike alone."""
    if not VNNI or ext.x8_isa() == "none":
        return  # the layers never make them here (the test above)
    arrays, _ = _weights(96, 1024, seed=8)
    x8 = q6k_weights.interleaved(*arrays)
    assert x8[0].dtype == mx.uint8 and x8[0].shape == (96, 1024 * 6 // 8)
    rng = np.random.default_rng(8)
    for rows in (1, 2, 3, 4, 5, 8, 9, 16, 17, 24, 33, 40):
        x = rng.standard_normal((rows, 1024)).astype(np.float32)
        want, got = _product(x, arrays, x_bytes), _product(x, x8, x_bytes)
        assert np.abs(got - want).max() / np.abs(want).max() < 2e-6, rows
        if rows > ext.x8_direct_rows(x_bytes):
            assert np.array_equal(got, want), rows
        alone = np.concatenate([_product(x[i : i + 1], x8, x_bytes) for i in range(min(rows, 3))])
        if rows <= ext.x8_direct_rows(x_bytes):
            assert np.array_equal(alone, got[: len(alone)]), rows


def test_the_x8_layout_refuses_what_it_cannot_hold():
    arrays, _ = _weights(20, 512)
    with pytest.raises(ValueError, match="multiple of 8"):
        ext.k6_interleave8(arrays[0])
    with pytest.raises(ValueError, match="multiple of 256"):
        ext.k6_interleave8(mx.zeros((8, 40), dtype=mx.uint32))
    with pytest.raises(ValueError, match="x8 layout"):
        ext.k6_x8_rows(arrays[0], arrays[1], arrays[2], mx.array([0]))  # uint32: not x8
    laid_out = (mx.zeros((8, 384), dtype=mx.uint8), mx.zeros((8, 32), dtype=mx.int8))
    with pytest.raises(ValueError, match="supers must be float16"):
        ext.k6_x8_rows(*laid_out, mx.zeros((8, 2), dtype=mx.float32), mx.array([0]))
    with pytest.raises(ValueError, match="ids must be integers"):
        ext.k6_x8_rows(*laid_out, mx.zeros((8, 2), dtype=mx.float16), mx.array([0.5]))
    if not VNNI:
        return
    bytes_ = mx.view(arrays[0], mx.uint8)  # uint8 weights of 20 columns: not the x8 layout
    with pytest.raises(ValueError, match="multiple of 8 out_features"):
        ext.quantized_matmul(mx.zeros((1, 512)), bytes_, arrays[1], arrays[2], 16, 6)
