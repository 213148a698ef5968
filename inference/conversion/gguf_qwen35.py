"""Qwen3.5 (llama.cpp's qwen35, dense, and qwen35moe): Qwen3-Next's hybrid of gated delta-net
layers and gated attention layers, with the delta-net's projections apart (in_proj_qkv, _z, _b,
_a) rather than interleaved by key head. mlx-lm's qwen3_5 and qwen3_5_moe run them.

llama.cpp's converter reorders the delta-net's value heads when there are more of them than key
heads: the checkpoint groups them by key head (key head g's values first), llama.cpp tiles them
(every key head's first value head, then every second...), so that its broadcast pairs value
head i with key head i % keys. mlx-lm pairs by group (i // per key head), as the checkpoint:
the import moves them back, in every tensor with a value head axis (rows of in_proj_qkv's v, z,
b, a and the convolution's v channels; columns of out_proj, A and the time step's bias).

Registered, with the other families, in gguf_registry.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from inference.conversion.gguf_architecture import (
    _ATTENTION,
    _EXPERTS,
    _QK_NORM,
    Architecture,
    Hyper,
)
from inference.conversion.gguf_config import _experts, _head_dim
from inference.conversion.gguf_file import UnsupportedGGUF
from inference.conversion.gguf_qwen import _row, _unsqueeze_last, delta_net

_QWEN35_LAYER = {
    "attn_norm": "input_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    **_ATTENTION,
    **_QK_NORM,
    "attn_qkv": "linear_attn.in_proj_qkv",
    "attn_gate": "linear_attn.in_proj_z",
    "ssm_beta": "linear_attn.in_proj_b",
    "ssm_alpha": "linear_attn.in_proj_a",
    "ssm_conv1d": "linear_attn.conv1d",
    "ssm_norm": "linear_attn.norm",
    "ssm_out": "linear_attn.out_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_QWEN35_MOE_LAYER = _QWEN35_LAYER | {
    **_EXPERTS,
    "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
    "ffn_up_shexp": "mlp.shared_expert.up_proj",
    "ffn_down_shexp": "mlp.shared_expert.down_proj",
    "ffn_gate_inp_shexp": "mlp.shared_expert_gate",
}
# mlx-lm's qwen3_5 keeps the text model under language_model; written there, the weights need no
# renaming by its sanitize, and config.json's per-module quantization names what it loads.
_TOP = {
    "token_embd": "language_model.model.embed_tokens",
    "output_norm": "language_model.model.norm",
    "output": "language_model.lm_head",
}
_PARAMS = {"ssm_a": "linear_attn.A_log", "ssm_dt.bias": "linear_attn.dt_bias"}


def _qwen35(hyper: Hyper) -> dict:
    """The delta-net's sizes and the rope, as mlx-lm's qwen3_5 reads them (its rope from
    rope_parameters alone, whose defaults would otherwise replace the file's base)."""
    if hyper.get("rope.scaling.type") not in (None, "none"):
        raise UnsupportedGGUF(f"{hyper.arch} with rope scaling is not supported")
    # Interleaved multimodal rope: for text every section's position is the token's, which is
    # plain (NeoX) rope over the rotated part of a head.
    rope = {
        "rope_type": "default",
        "rope_theta": float(hyper("rope.freq_base", 10000.0)),
        "partial_rotary_factor": int(hyper("rope.dimension_count")) / _head_dim(hyper),
    }
    return delta_net(hyper, QWEN35_ARCHITECTURES[hyper.arch]) | {"rope_parameters": rope}


def _qwen35_moe(hyper: Hyper) -> dict:
    # llama.cpp's qwen35moe: softmax routing over every layer, the chosen weights renormalized,
    # then scaled only by a factor the file gives (mlx-lm has none).
    if float(hyper.get("expert_weights_scale", 0.0) or 1.0) != 1.0:
        raise UnsupportedGGUF("qwen35moe with an expert weights scale is not supported")
    shared = int(hyper.get("expert_shared_feed_forward_length", 0) or 0)
    if not shared:
        raise UnsupportedGGUF("qwen35moe without a shared expert is not supported")
    return (
        _qwen35(hyper)
        | _experts(hyper)
        | {
            "shared_expert_intermediate_size": shared,
            "decoder_sparse_step": 1,
            "norm_topk_prob": True,
        }
    )


def _value_heads(hyper: Hyper) -> tuple[int, int]:
    """(key heads, value heads per key head)."""
    keys, values = int(hyper("ssm.group_count")), int(hyper("ssm.time_step_rank"))
    if values % keys:
        raise UnsupportedGGUF(f"{hyper.arch} with value heads not a multiple of key heads")
    return keys, values // keys


def _grouped_order(hyper: Hyper) -> tuple[int, ...] | None:
    """For each value head in the checkpoint's (grouped) order, its place in llama.cpp's tiled
    order; None where the converter left them (as many value heads as key heads)."""
    keys, per_key = _value_heads(hyper)
    if per_key == 1:
        return None
    # grouped head g * per_key + j (key head g's j-th) is tiled head j * keys + g
    return tuple((head % per_key) * keys + head // per_key for head in range(keys * per_key))


def _qwen35_rows(hyper: Hyper, key: str) -> tuple | None:
    """Runs of value-head rows back in grouped order: (source row, output row, count), after
    the rows (query and key heads) the converter did not move."""
    order = _grouped_order(hyper)
    if order is None:
        return None
    keys, key_dim = int(hyper("ssm.group_count")), int(hyper("ssm.state_size"))
    value_dim = int(hyper("ssm.inner_size")) // len(order)
    # rows ahead of the value heads, and the rows of one value head
    fixed, width = {
        "attn_qkv.weight": (2 * keys * key_dim, value_dim),
        "attn_gate.weight": (0, value_dim),
        "ssm_beta.weight": (0, 1),
        "ssm_alpha.weight": (0, 1),
        # the restored [channels, kernel, 1] has a row per channel and tap
        "ssm_conv1d.weight": (2 * keys * key_dim, value_dim),
    }.get(key, (None, 0))
    if fixed is None:
        return None
    if key == "ssm_conv1d.weight":
        kernel = int(hyper("ssm.conv_kernel"))
        fixed, width = fixed * kernel, width * kernel
    moved = tuple(
        (fixed + source * width, fixed + head * width, width) for head, source in enumerate(order)
    )
    return ((0, 0, fixed), *moved) if fixed else moved


def _qwen35_columns(hyper: Hyper, key: str) -> tuple[int, ...] | None:
    """out_proj's columns, A's and the time step bias's values: value heads back in grouped
    order (each output run of columns taking this source run)."""
    if key not in ("ssm_out.weight", "ssm_a", "ssm_dt.bias"):
        return None
    return _grouped_order(hyper)


def _architecture(
    gguf_name: str,
    model_type: str,
    hf_class: str,
    layer_names: dict[str, str],
    config: Callable[[Hyper], dict],
) -> Architecture:
    return Architecture(
        gguf_name,
        model_type,
        hf_class,
        layer_names,
        config,
        layer_prefix="language_model.model.layers",
        top_names=_TOP,
        layer_params=_PARAMS,
        # The converter stored A = -exp(A_log) and squeezed the convolution's weight; it added
        # 1 to the norms, as mlx-lm does when it reads a checkpoint
        shapes={"ssm_conv1d.weight": _unsqueeze_last, "ffn_gate_inp_shexp.weight": _row},
        transforms={"ssm_a": lambda a: np.log(-a)},
        row_segments=_qwen35_rows,
        column_order=_qwen35_columns,
    )


QWEN35_ARCHITECTURES = {
    "qwen35": _architecture("qwen35", "qwen3_5", "Qwen3_5ForCausalLM", _QWEN35_LAYER, _qwen35),
    "qwen35moe": _architecture(
        "qwen35moe", "qwen3_5_moe", "Qwen3_5MoeForCausalLM", _QWEN35_MOE_LAYER, _qwen35_moe
    ),
}
