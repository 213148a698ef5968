"""GGUF's Q6_K weights in the CPU kernels' layout (kernels/src/k6.h), as the import keeps them
(conversion/gguf_tensors.py) and the loader hands them over (engine/q6k.py): reading them in
MLX, and the kernels' layers that compute with them. Built at load, only where the kernels
have their path (AVX-512 VNNI)."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

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
    codes = (low | (high << 4)).astype(mx.float32).reshape(*lead, -1, GROUP) - 32.0
    per16 = mx.repeat(supers.astype(mx.float32), SUPER // GROUP, axis=-1)
    scale = per16 * scales.astype(mx.float32)
    return (codes * scale[..., None]).reshape(*lead, -1)


class _Q6KWeights:
    """The weights of a layer below: packed codes, int8 scales per 16 inputs and, as
    `biases`, float16 super-block scales per 256."""

    def _hold(self, weight: mx.array, scales: mx.array, supers: mx.array) -> None:
        nn.Module.__init__(self)
        self.weight, self.scales, self.biases = weight, scales, supers
        self.group_size, self.bits = GROUP, 6
        self.x_bytes = 2

    def dequantized(self) -> mx.array:
        return dequantize(self["weight"], self["scales"], self["biases"])


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
        return dequantize(self["weight"][x], self["scales"][x], self["biases"][x])
