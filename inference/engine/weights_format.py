"""What a loaded model's weights are, in words ("4-bit g64", "mxfp4", "bfloat16",
"4-bit g32 (6-bit for some layers)"): the pool's compute format says only "stored" for
weights kept as the checkpoint has them, which does not say what is stored.

Read from the config mlx-lm loaded the model with (its `quantization`, which mlx-lm also
fills in from a Hugging Face `quantization_config` it converts: mxfp4, mxfp8, nvfp4, AWQ,
GPTQ) and, for weights kept unquantized, from the parameters' own dtype.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

# mlx-lm's quantization keys for the whole model; any other key names one layer's own.
SCHEME_KEYS = {"group_size", "bits", "mode"}
# Modes whose name says their bits and group (MLX's microscaling formats).
NAMED_MODES = {"mxfp4", "mxfp8", "nvfp4"}


def describe(config: dict, model: nn.Module, compute_format: str) -> str:
    """The weights `model` holds now, loaded with `config`, computing in `compute_format`."""
    if compute_format != "stored":
        # compute_format.convert dequantized every layer and cast the model to this dtype.
        return compute_format
    quantization = config.get("quantization")
    if not isinstance(quantization, dict) or "bits" not in quantization:
        legacy = config.get("quantization_config") or {}
        if isinstance(legacy, dict) and legacy.get("quant_method") == "bitnet":
            return "bitnet ternary"  # mlx-lm's own BitLinear layers, no `quantization`
        # Unquantized (or an fp8 checkpoint that mlx-lm dequantized as it loaded it).
        return dtype_of(model)
    whole = scheme(quantization)
    others = _layer_schemes(quantization, whole, model)
    return f"{whole} ({', '.join(others)} for some layers)" if others else whole


def scheme(quantization: dict) -> str:
    """One quantization's words: "4-bit g64" (MLX's affine), or the format's name."""
    mode = quantization.get("mode", "affine")
    if mode in NAMED_MODES:
        return mode
    bits, group = quantization.get("bits"), quantization.get("group_size")
    words = f"{bits}-bit g{group}"
    return words if mode == "affine" else f"{words} {mode}"


def _layer_schemes(quantization: dict, whole: str, model: nn.Module) -> list[str]:
    """How the layers that differ from the model's quantization are kept, each once, the
    fewest bits first. A layer set to False is unquantized, or (a GGUF import's Q6_K, kept
    6-bit for the CPU kernels: q6k.py) the kernels' own layer."""
    modules: dict[str, Any] | None = None
    found: dict[str, float] = {}
    for path, layer in quantization.items():
        if path in SCHEME_KEYS:
            continue
        if isinstance(layer, dict):
            words = scheme(layer)
            if words == whole:
                continue
            if _same_but_bits(layer, quantization):
                words = f"{layer.get('bits')}-bit"  # the model's group and mode: bits say it
            found[words] = float(layer.get("bits") or 0)
        elif layer is False:
            if modules is None:
                modules = dict(model.named_modules())
            native = type(modules.get(path)).__name__.startswith("Q6K")
            found["6-bit Q6_K" if native else "unquantized"] = 6.0 if native else 99.0
    return sorted(found, key=lambda words: (found[words], words))


def _same_but_bits(layer: dict, quantization: dict) -> bool:
    mode = layer.get("mode", "affine")
    same_mode = mode == quantization.get("mode", "affine") and mode not in NAMED_MODES
    return same_mode and layer.get("group_size") == quantization.get("group_size")


def dtype_of(model: nn.Module) -> str:
    """The floating dtype holding most of the model's parameters ("bfloat16", "float32")."""
    sizes: Counter[str] = Counter()
    for _, array in tree_flatten(model.parameters()):
        if mx.issubdtype(array.dtype, mx.floating):
            sizes[str(array.dtype).removeprefix("mlx.core.")] += array.size
    if not sizes:
        raise ValueError("a model without floating-point parameters")
    return sizes.most_common(1)[0][0]
