"""The kernels' x8 layout (kernels/src/x8_vnni.cpp): a linear's weights interleaved eight
columns at a time, so that decode reads them as one stream. Products over it equal those over
MLX's layout; the layers take it where the kernels read it, and nothing reads it as MLX's."""

from __future__ import annotations

import itertools

import mlx.core as mx
import mlx.nn as nn
import pytest

from inference.engine.cpu import layers
from inference.engine.cpu.ext import ext

pytestmark = pytest.mark.database_independent

X8_HERE = ext is not None and ext.x8_isa() != "none"


def quantized(n: int, k: int, bits: int, group: int, dtype=mx.float16) -> tuple:
    w, s, b = mx.quantize(mx.random.normal((n, k)), group_size=group, bits=bits)
    return w, s.astype(dtype), b.astype(dtype)


def test_the_layout_goes_there_and_back_exactly():
    mx.random.seed(1)
    for bits, group in ((4, 32), (8, 64), (4, 128)):
        w, s, b = quantized(48, 256, bits, group)
        x8 = layers.interleaved(w, s, b)
        assert x8[0].dtype == mx.uint8 and x8[0].shape == (48, 256 * bits // 8)
        back = layers.deinterleaved(*x8)
        for a, c in zip(back, (w, s, b), strict=True):
            assert a.dtype == c.dtype and mx.array_equal(a, c).item()


def test_products_over_x8_equal_mlx_layout_at_every_path():
    """1-24 rows take the direct path over x8, 25-32 it too with one-byte activations, past that
    the integer tiles read the interleaved columns: each equals its twin over MLX's layout (the
    direct paths add in another order: within float32's rounding; the tiles alike bit for bit).
    Without AVX-512 VNNI the layers never make x8 weights (the last tests)."""
    vnni = ext is not None and ext.direct_isa() == "avx512vnni"
    assert vnni == X8_HERE
    if not X8_HERE:
        return
    mx.random.seed(2)
    cases = itertools.product((4, 8), (32, 64, 128), (1, 2), (mx.float16, mx.bfloat16, mx.float32))
    for bits, group, x_bytes, dtype in cases:
        w, s, b = quantized(96, 512, bits, group, dtype)
        x8 = layers.interleaved(w, s, b)
        for rows in (1, 3, 8, 12, 24, 25, 33, 40):
            x = mx.random.normal((rows, 512))
            want = ext.quantized_matmul(x, w, s, b, group, bits, x_bytes=x_bytes)
            got = ext.quantized_matmul(x, *x8, group, bits, x_bytes=x_bytes)
            err = (mx.abs(got - want).max() / mx.abs(want).max()).item()
            assert err < 2e-6, (bits, group, x_bytes, dtype, rows, err)
            if rows > ext.x8_direct_rows(x_bytes):
                assert mx.array_equal(got, want).item()


def test_a_linear_takes_x8_where_the_kernels_read_it_and_gives_mlx_weights_back():
    mx.random.seed(3)
    source = nn.QuantizedLinear(256, 64, bias=False, group_size=32, bits=4)
    linear = layers.KernelLinear(source)
    assert layers.x8_weights(linear) == X8_HERE
    assert (linear["weight"].dtype == mx.uint8) == X8_HERE
    want = mx.dequantize(source.weight, source.scales, source.biases, 32, 4)
    assert mx.array_equal(linear.dequantized(), want).item()
    x = mx.random.normal((2, 256))
    expected = x @ want.T
    assert mx.allclose(linear(x), expected, atol=2e-2 * mx.abs(expected).max().item()).item()


def test_outputs_not_a_multiple_of_eight_keep_mlx_layout():
    linear = layers.KernelLinear(nn.QuantizedLinear(256, 60, bias=False, group_size=32, bits=4))
    assert linear["weight"].dtype == mx.uint32 and not layers.x8_weights(linear)


def test_x8_weights_are_never_read_as_mlx_s():
    """uint8 where MLX's are uint32: mx.dequantize refuses them rather than read garbage, and
    the kernels refuse where they cannot read the layout, in plain words."""
    w, s, b = layers.interleaved(*quantized(64, 256, 4, 32))
    with pytest.raises(ValueError):
        mx.eval(mx.dequantize(w, s, b, 32, 4))
    with pytest.raises(ValueError, match="multiple of 8 out_features"):
        ext.quantized_matmul(mx.zeros((1, 256)), w[:60], s[:60], b[:60], 32, 4)
    forced = X8_HERE and ext.use_isa("avx2")  # as on a CPU without AVX-512 VNNI
    try:
        with pytest.raises(ValueError, match=r"x8 layout.*AVX-512 VNNI"):
            ext.quantized_matmul(mx.zeros((1, 256)), w, s, b, 32, 4)
    finally:
        if forced:
            ext.use_isa("avx512")


def test_mlx_layout_keeps_mlx_s_and_in_features_reads_either():
    source = nn.QuantizedLinear(256, 64, bias=False, group_size=32, bits=4)
    with layers.mlx_layout():
        kept = layers.KernelLinear(source)
    assert kept["weight"].dtype == mx.uint32
    made = layers.KernelLinear(source)  # the layout is back to the CPU's choice after
    assert (made["weight"].dtype == mx.uint8) == X8_HERE
    assert layers.in_features(kept) == layers.in_features(made) == 256
