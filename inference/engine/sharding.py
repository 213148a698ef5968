"""A catalog model marked parallel, loaded as this rank's shard of it (engine thread only).

mlx-lm's model code does the splitting: `model.shard(group)` for tensor parallelism (llama,
qwen2/3, mistral, deepseek and others: every layer's projections split by heads and columns,
an all_sum after each block), `model.model.pipeline(group)` for pipeline parallelism (each
rank holds a run of layers and passes activations on). Weights are read lazily, so a rank
only ever materializes its own part.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx_lm.utils import load_tokenizer

from inference.engine import compute_format, cpu, q6k
from inference.engine.chunked import serve_within_first_chunk
from inference.engine.compute_format import FormatChoice
from inference.engine.types import EngineError, ErrorKind, ModelSpec


def load_sharded(
    spec: ModelSpec, group: mx.distributed.Group, room_bytes: int
) -> tuple[Any, Any, dict, FormatChoice]:
    """(model, tokenizer, config.json, the format it computes in) of this rank's shard."""
    path = Path(spec.location)
    # Q6_K layers as MLX's 8-bit: the shards' projections are MLX's own (engine/q6k.py).
    model, config, _ = q6k.load_model(path, lazy=True, strict=spec.parallel != "pipeline")
    serve_within_first_chunk(model)  # Llama 4: engine/chunked.py
    _check(spec, model, config, group.size())
    choice = _format(spec, model, room_bytes * group.size())
    model = compute_format.convert(model, choice.format)  # before sharding: it knows the layers
    if spec.parallel == "tensor":
        model.shard(group)
    else:
        model.model.pipeline(group)
    mx.eval(model.parameters())
    if choice.kernels:  # norms, RoPE, attention: the sharded projections stay MLX's
        cpu.accelerate(model)
    tokenizer = load_tokenizer(path, eos_token_ids=config.get("eos_token_id"))
    return model, tokenizer, config, choice


def _check(spec: ModelSpec, model: Any, config: dict, size: int) -> None:
    kind = config.get("model_type", "?")
    if spec.activations == "8bit":
        _refuse(
            "8bit activations round on the CPU kernels' quantized layers, which sharded "
            "projections do not take"
        )
    if spec.parallel == "tensor":
        if not hasattr(model, "shard"):
            _refuse(f"mlx-lm cannot split '{kind}' models tensor-parallel")
        for key in ("num_attention_heads", "num_key_value_heads"):
            heads = config.get(key)
            if isinstance(heads, int) and heads % size:
                _refuse(f"its {key} ({heads}) does not divide by the group's {size} ranks")
    elif spec.parallel == "pipeline":
        if not hasattr(getattr(model, "model", None), "pipeline"):
            _refuse(f"mlx-lm cannot split '{kind}' models into a pipeline")
    else:
        _refuse(f"unknown parallel mode '{spec.parallel}'")


def _format(spec: ModelSpec, model: Any, group_room: int) -> FormatChoice:
    """As compute_format.choose, without timing (ranks must agree): where it would time the
    stored weights against float32, float32, since the kernels' quantized layers do not
    apply to sharded projections."""
    choice = compute_format.choose(spec.compute_format, model, group_room)
    if choice.format == compute_format.MEASURE:
        return FormatChoice("float32", "sharded: float32 for the BLAS (no quantized kernel)", True)
    return choice


def _refuse(reason: str) -> None:
    raise EngineError(ErrorKind.MODEL_UNAVAILABLE, f"cannot be loaded over the group: {reason}")
