"""GGUF's Q6_K weights in the CPU kernels' layout (kernels/src/k6.h), as the import keeps them
(conversion/gguf_tensors.py) and the loader hands them over (engine/q6k.py): reading them in
MLX, and the kernels' layers that compute with them. Built at load, only where the kernels
have their path (AVX-512 VNNI), there in the x8 layout (k6_vnni.cpp: eight columns' pieces
side by side per 64 values, so that decode reads a product as one stream: a 2048x6144 product
at one row took 0.49 ms column by column, 0.41 this way, on the 2-core Zen 5 VM)."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from inference.engine.cpu import layers
from inference.engine.cpu.ext import ext
from inference.engine.cpu.layers import KernelEmbedding, KernelLinear

GROUP, SUPER = 16, 256  # inputs per int8 scale, per float16 super-block scale


def dequantize(weight: mx.array, scales: mx.array, supers: mx.array) -> mx.array:
    """float32 weights [rows, K] from the kernels' layout: per 128, 64 bytes of low nibbles
    (byte i: codes i and 64 + i), 32 of top pairs (byte i: codes i, 32 + i, 64 + i, 96 + i at
    bits 0, 2, 4, 6); weight = d[k / 256] * scales[k / 16] * (code - 32)."""
    *lead, _ = weight.shape
    packed = mx.view(weight, mx.uint8).reshape(*lead, -1, 96)
    nibbles, top = packed[..., :64], packed[..., 64:]
    low = mx.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1)
    high = mx.concatenate([(top >> s) & 0x03 for s in (0, 2, 4, 6)], axis=-1)
    return _scaled((low | (high << 4)).reshape(*lead, -1), scales, supers)


def _codes_x8(pieces: mx.array) -> mx.array:
    """Codes [..., K] from a column's bytes in the x8 layout's order, gathered ([..., K * 6 / 8]:
    per 64 values 16 bytes each of N0 (values i, 16 + i), N1 (32 + i, 48 + i), T (top pairs))."""
    *lead, nbytes = pieces.shape
    p = pieces.reshape(*lead, nbytes // 48, 3, 16)
    n0, n1, top = p[..., 0, :], p[..., 1, :], p[..., 2, :]
    low = [n0 & 0x0F, n0 >> 4, n1 & 0x0F, n1 >> 4]
    codes = [low[s] | (((top >> (2 * s)) & 0x03) << 4) for s in range(4)]
    return mx.stack(codes, axis=-2).reshape(*lead, -1)


def _scaled(codes: mx.array, scales: mx.array, supers: mx.array) -> mx.array:
    """Codes [..., K] (0..63) as weights: d[k / 256] * scales[k / 16] * (code - 32)."""
    *lead, _ = codes.shape
    per16 = mx.repeat(supers.astype(mx.float32), SUPER // GROUP, axis=-1)
    scale = per16 * scales.astype(mx.float32)
    grouped = codes.astype(mx.float32).reshape(*lead, -1, GROUP) - 32.0
    return (grouped * scale[..., None]).reshape(*lead, -1)


def dequantize_x8(weight: mx.array, scales: mx.array, supers: mx.array, index=None) -> mx.array:
    """float32 weights [N, K] (or the rows of `index`) from the x8 layout."""
    pieces, s, d = layers.x8_columns(weight, scales, supers, index)
    return _scaled(_codes_x8(pieces), s, d)


def x8_here(weight: mx.array) -> bool:
    """Whether these Q6_K weights take the x8 layout here."""
    return layers.x8_here(weight.shape[0]) and hasattr(ext, "k6_interleave8")


def interleaved(weight: mx.array, scales: mx.array, supers: mx.array) -> tuple:
    """The kernels' Q6_K arrays in the x8 layout, evaluated (the source's can go)."""
    out = (
        ext.k6_interleave8(weight),
        ext.interleave8(scales, scales.itemsize),
        ext.interleave8(supers, supers.itemsize),
    )
    mx.eval(out)
    return out


class _Q6KWeights:
    """The weights of a layer below: packed codes, int8 scales per 16 inputs and, as
    `biases`, float16 super-block scales per 256."""

    def _hold(self, weight: mx.array, scales: mx.array, supers: mx.array) -> None:
        nn.Module.__init__(self)
        if x8_here(weight):
            weight, scales, supers = interleaved(weight, scales, supers)
        self.weight, self.scales, self.biases = weight, scales, supers
        self.group_size, self.bits = GROUP, 6
        self.x_bytes = 2

    def dequantized(self) -> mx.array:
        return self._rows(None)

    def _rows(self, index: mx.array | None) -> mx.array:
        arrays = self["weight"], self["scales"], self["biases"]
        if arrays[0].dtype == mx.uint8:
            if index is not None and hasattr(ext, "k6_x8_rows"):
                # One primitive for an embedding's lookup: MLX's gather and unpacking took ~75
                # small operations a decode step, each encoded on the engine thread.
                return ext.k6_x8_rows(*arrays, index)
            return dequantize_x8(*arrays, index)
        if index is None:
            return dequantize(*arrays)
        return dequantize(*(a[index] for a in arrays))


class Q6KLinear(_Q6KWeights, KernelLinear):
    def __init__(
        self, weight: mx.array, scales: mx.array, supers: mx.array, bias: mx.array | None = None
    ) -> None:
        self._hold(weight, scales, supers)
        if bias is not None:
            self.bias = bias
        self.freeze()


class Q6KEmbedding(_Q6KWeights, KernelEmbedding):
    def __init__(self, weight: mx.array, scales: mx.array, supers: mx.array) -> None:
        self._hold(weight, scales, supers)
        self.freeze()

    def __call__(self, x: mx.array) -> mx.array:
        return self._rows(x)
