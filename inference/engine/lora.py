"""A LoRA adapter served as its own model beside its base, sharing the base's weights.

An adapter folder is what mlx-lm's `load(adapter_path=)` reads: adapter_config.json
(`fine_tune_type`, `lora_parameters.scale`...) and adapters.safetensors (`...q_proj.lora_a`,
`...lora_b` per adapted linear). mlx-lm applies one by replacing the base model's linears with
`LoRALinear`s in place, which would change the base for every request; fusing the adapter into
the weights and back per step cannot serve both in one batch either.

Here the adapter's model is a second module tree over the same arrays: every module that holds
other modules (the model, its layers, attention, MLP) is copied, every leaf (linears,
embeddings, norms, the CPU kernels' layers) is the base's own object, and the adapted linears
become mlx-lm's `LoRALinear` around the base's linear. So the base computes exactly as before,
the adapter's model adds `scale * (x @ A) @ B` where mlx-lm would, each model has its own
runner and batch, and the adapter costs only its A and B matrices in memory. A llama block
with an adapted linear leaves the CPU kernels' fused path for mlx-lm's own (fused.py checks
its parts each call); its linears still run the kernels.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_unflatten
from mlx_lm.tuner.lora import LoRALinear

from inference.engine.types import EngineError, ErrorKind

CONFIG, WEIGHTS = "adapter_config.json", "adapters.safetensors"


def _refused(message: str) -> EngineError:
    return EngineError(ErrorKind.MODEL_UNAVAILABLE, message)


def shared_copy(module: Any) -> Any:
    """`module`'s tree with every container copied and every leaf module shared."""
    if isinstance(module, list):
        return [shared_copy(item) for item in module]
    if isinstance(module, dict) and not isinstance(module, nn.Module):
        return {key: shared_copy(value) for key, value in module.items()}
    if not isinstance(module, nn.Module) or not module.children():
        return module  # arrays, settings and leaf modules: the base's own
    twin = copy.copy(module)  # a new dict with the same entries, and the same attributes
    for key, value in module.items():
        if isinstance(value, nn.Module | list | dict):
            twin[key] = shared_copy(value)
    return twin


def read_adapter(folder: Path) -> tuple[dict, dict[str, mx.array]]:
    """The adapter's config and its LoRA matrices, refused unless mlx-lm LoRA on linears."""
    try:
        config = json.loads((folder / CONFIG).read_text())
        weights = mx.load(str(folder / WEIGHTS))
    except (OSError, ValueError) as exc:
        raise _refused(f"its adapter could not be read from {folder}: {exc}") from None
    kind = config.get("fine_tune_type", "lora")
    if kind != "lora":
        raise _refused(f"its adapter is {kind!r}; only LoRA adapters share their base's weights")
    if "scale" not in config.get("lora_parameters", {}):
        raise _refused("its adapter_config.json has no lora_parameters.scale")
    return config, weights


def with_adapter(base: nn.Module, folder: Path) -> tuple[nn.Module, int]:
    """The adapter's model over `base`'s weights, and the bytes the adapter adds."""
    config, weights = read_adapter(folder)
    scale = float(config["lora_parameters"]["scale"])
    twin = shared_copy(base)
    named = dict(twin.named_modules())
    layers = []
    for path in sorted({name.rsplit(".", 1)[0] for name in weights}):
        a, b = weights.get(f"{path}.lora_a"), weights.get(f"{path}.lora_b")
        target = named.get(path)
        if a is None or b is None or target is None or isinstance(target, nn.Embedding):
            raise _refused(f"its adapter's {path} is not a LoRA pair on one of the base's linears")
        lora = LoRALinear(a.shape[0], b.shape[1], r=a.shape[1], scale=scale)
        lora.linear, lora.lora_a, lora.lora_b = target, a, b
        layers.append((path, lora))
    twin.update_modules(tree_unflatten(layers))
    twin.eval()
    return twin, sum(array.nbytes for array in weights.values())
