"""The format a model computes in once loaded: its stored one, or float32 on Linux CPUs.

MLX's quantized and float16/bfloat16 CPU matmuls are not BLAS-backed; float32 ones are. With an
optimized BLAS loaded, a 4-bit model dequantized to float32 decodes several times faster on a
CPU (and far faster in batches), at four to eight times the memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.utils import dequantize_model

from inference import blas

DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}
QUANTIZED = (nn.QuantizedLinear, nn.QuantizedEmbedding)


@dataclass(frozen=True)
class FormatChoice:
    format: str  # "stored" or a dtype name
    reason: str


def float32_bytes(model: nn.Module) -> int:
    """What the model would take in float32, computed from the packed shapes before converting."""
    quantized = {name: m for name, m in model.named_modules() if isinstance(m, QUANTIZED)}
    total = 0
    for path, array in tree_flatten(model.parameters()):
        owner, _, leaf = path.rpartition(".")
        module = quantized.get(owner)
        if module is None:
            total += array.size
        elif leaf == "weight":
            total += array.size * 32 // module.bits
        elif leaf not in ("scales", "biases"):
            total += array.size
    return total * 4


def choose(requested: str, model: nn.Module, room_bytes: int) -> FormatChoice:
    if requested == "quantized":
        return FormatChoice("stored", "the catalog asks for the stored weights")
    if requested in DTYPES:
        return FormatChoice(requested, "the catalog asks for it")
    if mx.default_device() != mx.cpu:
        return FormatChoice("stored", "a GPU backend computes the stored format fastest")
    if blas.status().library is None:
        return FormatChoice("stored", f"no optimized BLAS ({blas.status().reason})")
    needed = float32_bytes(model)
    if needed > room_bytes:
        return FormatChoice(
            "stored",
            f"float32 would take {needed / 2**20:,.0f} MiB, more than the "
            f"{room_bytes / 2**20:,.0f} MiB left in the pool's budget",
        )
    return FormatChoice("float32", "CPU backend with an optimized BLAS, and it fits")


def apply(model: nn.Module, choice: FormatChoice) -> nn.Module:
    if choice.format == "stored":
        return model
    model = dequantize_model(model)
    model.set_dtype(DTYPES[choice.format])
    mx.eval(model.parameters())
    return model
