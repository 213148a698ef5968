"""config.json from a GGUF's hyperparameters: what every architecture's config holds
(sizes, heads, rope and its scaling) and the readers the families' extra configs share (head
size, per-layer sizes, expert counts)."""

from __future__ import annotations

import numpy as np

from inference.conversion.gguf_architecture import Architecture, Hyper
from inference.conversion.gguf_file import GGUFFile, UnsupportedGGUF


def main_layers(file: GGUFFile, arch: Architecture) -> int:
    """The layers mlx-lm runs: llama.cpp's block count includes the multi-token prediction
    layers (GLM-4.5's nextn) appended after them."""
    hyper = Hyper(file, arch.gguf_name)
    return int(hyper("block_count")) - int(hyper.get("nextn_predict_layers", 0) or 0)


def _kv_heads(hyper: Hyper, arch: Architecture, heads: int) -> int:
    """One count for every attention layer; a hybrid's list has 0 for its other layers."""
    kv_heads = hyper("attention.head_count_kv", heads)
    if not isinstance(kv_heads, list):
        return int(kv_heads)
    counts = {int(count) for count in kv_heads if count or not arch.hybrid}
    if len(counts) != 1:
        raise UnsupportedGGUF("per-layer key/value head counts are not supported yet")
    return counts.pop()


def attention_layers(hyper: Hyper) -> list[bool]:
    kv_heads = hyper("attention.head_count_kv")
    if not isinstance(kv_heads, list):
        return [True] * int(hyper("block_count"))
    return [bool(count) for count in kv_heads]


def _head_dim(hyper: Hyper) -> int:
    default = int(hyper("embedding_length")) // int(hyper("attention.head_count"))
    return int(hyper.get("attention.key_length", default))


def model_config(file: GGUFFile, arch: Architecture, vocab_size: int) -> dict:
    hyper = Hyper(file, arch.gguf_name)
    heads = int(hyper("attention.head_count"))
    kv_heads = None if arch.per_layer_sizes else _kv_heads(hyper, arch, heads)
    config = {
        "architectures": [arch.hf_class],
        "model_type": arch.model_type,
        "hidden_size": int(hyper("embedding_length")),
        "num_hidden_layers": main_layers(file, arch),
        "intermediate_size": None if arch.per_layer_sizes else _feed_forward(hyper),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": _head_dim(hyper),
        "rms_norm_eps": float(hyper("attention.layer_norm_rms_epsilon", 1e-5)),
        "vocab_size": vocab_size,
        "max_position_embeddings": int(hyper("context_length", 4096)),
        "rope_theta": float(hyper("rope.freq_base", 10000.0)),
        "rope_traditional": arch.rope_traditional,
        "tie_word_embeddings": file.tensor("output.weight") is None,
        "bos_token_id": file.metadata.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": file.metadata.get("tokenizer.ggml.eos_token_id"),
    }
    if arch.tied_only and not config["tie_word_embeddings"]:
        raise UnsupportedGGUF(f"{arch.gguf_name} with a separate output.weight is not supported")
    scaling = _rope_scaling(hyper)
    if scaling:
        config["rope_scaling"] = scaling
    config.update(arch.extra_config(hyper))
    return config


def _rope_scaling(hyper: Hyper) -> dict | None:
    kind = hyper.get("rope.scaling.type")
    if kind in (None, "none"):
        return None
    factor = float(hyper("rope.scaling.factor"))
    if kind == "linear":
        return {"type": "linear", "factor": factor}
    if kind == "yarn":
        return _yarn(hyper, factor)
    raise UnsupportedGGUF(f"rope scaling {kind!r} is not supported (supported: linear, yarn)")


def _yarn(hyper: Hyper, factor: float) -> dict:
    """mlx-lm's YarnRoPE: llama.cpp's YaRN but for its extrapolation mix, which a converter
    may set. llama.cpp ignores the file's yarn_attn_factor (it derives the scale from the
    factor, as YarnRoPE does) and multiplies in rope.scaling.attn_factor."""
    if float(hyper.get("rope.scaling.yarn_ext_factor", 1.0)) != 1.0:
        raise UnsupportedGGUF("YaRN with an extrapolation factor other than 1 is not supported")
    if float(hyper.get("rope.scaling.attn_factor", 1.0)) != 1.0:
        raise UnsupportedGGUF("YaRN with a rope attention factor is not supported")
    scaling = {
        "type": "yarn",
        "factor": factor,
        "original_max_position_embeddings": int(hyper("rope.scaling.original_context_length")),
    }
    log_multiplier = float(hyper.get("rope.scaling.yarn_log_multiplier", 0.0) or 0.0)
    if log_multiplier and hyper.arch == "deepseek2":
        # The converter stored 0.1 * mscale_all_dim, and llama.cpp takes mscale to be the same
        # (DeepSeek's configs have them equal): no rotary scale, the attention's scale squared.
        mscale = float(np.float32(log_multiplier) / np.float32(0.1))  # as llama.cpp divides
        scaling |= {"mscale": mscale, "mscale_all_dim": mscale}
    elif log_multiplier:
        scaling |= {"mscale": 1.0, "mscale_all_dim": log_multiplier}
    for key in ("beta_fast", "beta_slow"):
        if hyper.get(f"rope.scaling.yarn_{key}") is not None:
            scaling[key] = float(hyper(f"rope.scaling.yarn_{key}"))
    return scaling


def _per_layer(hyper: Hyper, key: str) -> list[int]:
    value = hyper(key)
    if isinstance(value, list):
        return [int(v) for v in value]
    return [int(value)] * int(hyper("block_count"))


def _feed_forward(hyper: Hyper) -> int:
    """One feed-forward size; a hybrid's list has 0 for layers without one."""
    sizes = {size for size in _per_layer(hyper, "feed_forward_length") if size}
    if len(sizes) > 1:
        raise UnsupportedGGUF("per-layer feed-forward sizes are not supported yet")
    return sizes.pop() if sizes else 0


def _experts(hyper: Hyper) -> dict:
    """The expert counts every mixture-of-experts GGUF has."""
    length = hyper("expert_feed_forward_length")
    if isinstance(length, list):
        raise UnsupportedGGUF("per-layer expert sizes are not supported yet")
    return {
        "num_experts": int(hyper("expert_count")),
        "num_experts_per_tok": int(hyper("expert_used_count")),
        "moe_intermediate_size": int(length),
    }
