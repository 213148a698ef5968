"""GGUF's Q6_K matrices as the import keeps them (conversion/gguf_tensors.py: mode "q6_k", the
CPU kernels' layout of kernels/src/k6.h), read at load. Engine thread only.

Where the CPU kernels compute the stored weights and have the path for them (AVX-512 VNNI),
each such linear or embedding becomes the kernels' own layer (cpu/q6k_weights.py: Q6KLinear,
Q6KEmbedding), 6.56 bits a weight as in the GGUF. Anywhere else (Metal, CUDA, the kernels off
or without that path, a float compute format, a sharded group, encoders) it becomes MLX's
8-bit affine at group 32, what the import wrote for Q6_K before it kept it (`to_affine8`).
Either way mlx-lm builds the model: only its `sanitize` step is wrapped, to hand these layers
over before the weights are loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_unflatten
from mlx_lm.utils import _get_classes, load_config, load_tokenizer
from mlx_lm.utils import load_model as mlx_lm_load_model

from inference.engine.cpu.q6k_weights import Q6KEmbedding, Q6KLinear, dequantize

MODE = "q6_k"
AFFINE8 = {"group_size": 32, "bits": 8}


@dataclass(frozen=True)
class Q6KLoad:
    """What became of a model's Q6_K layers at load."""

    layers: int = 0
    native: bool = False  # the kernels' own layers (else MLX's 8-bit)

    def describe(self, compute_format: str, refusal: str | None) -> str:
        """For the model's format reason: once it computes in `compute_format` ("stored" or a
        dtype), `refusal` saying why they were not kept 6-bit."""
        if compute_format != "stored":
            return f"its {self.layers} Q6_K layers in {compute_format}"
        if self.native:
            return f"its {self.layers} Q6_K layers 6-bit in the CPU kernels, as in the GGUF"
        return f"its {self.layers} Q6_K layers as MLX 8-bit ({refusal})"


def layers(config: dict) -> list[str]:
    """The module paths whose weights are stored as Q6_K."""
    quantization = config.get("quantization") or {}
    return [p for p, q in quantization.items() if isinstance(q, dict) and q.get("mode") == MODE]


def to_affine8(weight: mx.array, scales: mx.array, supers: mx.array) -> tuple:
    """MLX's 8-bit affine (group 32, float16 scales and biases) of these weights, lazily."""
    q, s, b = mx.quantize(dequantize(weight, scales, supers), **AFFINE8)
    return q, s.astype(mx.float16), b.astype(mx.float16)


def load_model(path: Path, native: bool = False, **kwargs: Any) -> tuple[nn.Module, dict, Q6KLoad]:
    """mlx-lm's load_model, with the folder's Q6_K layers as the kernels' own (`native`) or as
    MLX's 8-bit; kwargs go to load_model."""
    config = load_config(Path(path))
    paths = layers(config)
    if not paths:
        model, config = mlx_lm_load_model(Path(path), **kwargs)
        return model, config, Q6KLoad()
    quantization = dict(config["quantization"])
    for p in paths:  # native: no quantizing (the layer is the kernels' already), else 8-bit
        quantization[p] = False if native else dict(AFFINE8)

    def classes(config: dict):
        model_class, args_class = _get_classes(config=config)
        return _handing_over(model_class, paths, native), args_class

    model, config = mlx_lm_load_model(
        Path(path), model_config={"quantization": quantization}, get_model_classes=classes, **kwargs
    )
    return model, config, Q6KLoad(len(paths), native)


def load(folder: Path) -> tuple[nn.Module, Any]:
    """mlx-lm's `load` of a local folder (model and tokenizer), its Q6_K layers as MLX's 8-bit:
    for the decoders that embed or rerank, which the kernels' layers are not swapped into."""
    model, config, _ = load_model(Path(folder))
    return model, load_tokenizer(Path(folder), eos_token_ids=config.get("eos_token_id"))


def _handing_over(model_class: type, paths: list[str], native: bool) -> type:
    """The model class whose sanitize hands the Q6_K layers over (kept or converted)."""

    def sanitize(self, weights: dict) -> dict:
        if hasattr(model_class, "sanitize"):
            weights = model_class.sanitize(self, weights)
        # The family's sanitize may drop some (Gemma 4's values shared with its keys).
        held = [p for p in paths if f"{p}.weight" in weights]
        if native:
            _swap_in(self, weights, held)
            return weights
        for p in held:
            q, s, b = to_affine8(
                weights[f"{p}.weight"], weights[f"{p}.scales"], weights[f"{p}.biases"]
            )
            weights.update({f"{p}.weight": q, f"{p}.scales": s, f"{p}.biases": b})
        return weights

    # The model's own name and module: code that finds a family by them finds it still.
    return type(
        model_class.__name__,
        (model_class,),
        {
            "sanitize": sanitize,
            "__module__": model_class.__module__,
            "__qualname__": model_class.__qualname__,
        },
    )


def _swap_in(model: nn.Module, weights: dict, paths: list[str]) -> None:
    modules = dict(model.named_modules())
    swaps = []
    for p in paths:
        arrays = (weights[f"{p}.weight"], weights[f"{p}.scales"], weights[f"{p}.biases"])
        old = modules[p]
        if isinstance(old, nn.Embedding):
            new = Q6KEmbedding(*arrays)
        else:
            new = Q6KLinear(*arrays, bias=old.get("bias"))
        # The layer may hold them in another layout (x8): what load_weights sets next is its own.
        weights.update({f"{p}.{k}": new[k] for k in ("weight", "scales", "biases")})
        swaps.append((p, new))
    model.update_modules(tree_unflatten(swaps))
