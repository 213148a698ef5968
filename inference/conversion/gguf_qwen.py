"""Qwen's families: Qwen2 and Qwen3 (Llama's layers, Qwen3's with q/k norms), Qwen3-MoE and
Qwen3-Next (gated delta-net layers between gated attention layers, which Qwen3.5, gguf_qwen35,
builds on)."""

from __future__ import annotations

import numpy as np

from inference.conversion.gguf_architecture import (
    _ATTENTION,
    _EXPERTS,
    _QK_NORM,
    Architecture,
    Hyper,
)
from inference.conversion.gguf_config import _experts, _head_dim, main_layers
from inference.conversion.gguf_file import UnsupportedGGUF
from inference.conversion.gguf_llama import _LLAMA_LAYER

_QWEN3_MOE_LAYER = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    **_ATTENTION,
    **_QK_NORM,
    **_EXPERTS,
}

# Qwen3-Next: gated delta-net layers, then every n-th a gated attention layer (its q_proj
# holds the gate too); experts with a gated shared expert.
_QWEN3_NEXT_LAYER = {
    "attn_norm": "input_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    **_ATTENTION,
    **_QK_NORM,
    # mlx-lm's in_proj_qkvz interleaves q, k, v, z by key head; llama.cpp's converter
    # regrouped them as attn_qkv and attn_gate (z)
    "attn_qkv": "linear_attn.in_proj_qkvz",
    "attn_gate": "linear_attn.in_proj_qkvz",
    "ssm_ba": "linear_attn.in_proj_ba",
    "ssm_conv1d": "linear_attn.conv1d",
    "ssm_norm": "linear_attn.norm",
    "ssm_out": "linear_attn.out_proj",
    **_EXPERTS,
    "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
    "ffn_up_shexp": "mlp.shared_expert.up_proj",
    "ffn_down_shexp": "mlp.shared_expert.down_proj",
    "ffn_gate_inp_shexp": "mlp.shared_expert_gate",
}


def _qwen3_moe(hyper: Hyper) -> dict:
    # llama.cpp's qwen3moe makes every layer a mixture and always renormalizes the chosen
    # experts' weights (Qwen3-30B-A3B's norm_topk_prob); mlx-lm reads both from the config.
    return _experts(hyper) | {
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
    }


def delta_net(hyper: Hyper, arch: Architecture) -> dict:
    """A gated delta-net hybrid's layer pattern and delta-net sizes (Qwen3-Next, Qwen3.5), as
    mlx-lm reads them: an attention layer every full_attention_interval-th, refused otherwise."""
    interval = int(hyper.get("full_attention_interval", 4) or 4)
    layers = main_layers(hyper.file, arch)
    recurrent = hyper.get("attention.recurrent_layers")
    expected = [(i + 1) % interval != 0 for i in range(layers)]
    if recurrent is not None and [bool(r) for r in recurrent[:layers]] != expected:
        raise UnsupportedGGUF(f"{hyper.arch} whose attention layers are not every n-th")
    value_heads = int(hyper("ssm.time_step_rank"))
    return {
        "full_attention_interval": interval,
        "linear_num_value_heads": value_heads,
        "linear_num_key_heads": int(hyper("ssm.group_count")),
        "linear_key_head_dim": int(hyper("ssm.state_size")),
        "linear_value_head_dim": int(hyper("ssm.inner_size")) // value_heads,
        "linear_conv_kernel_dim": int(hyper("ssm.conv_kernel")),
    }


def _qwen3_next(hyper: Hyper) -> dict:
    shared = int(hyper.get("expert_shared_feed_forward_length", 0) or 0)
    if not shared:
        raise UnsupportedGGUF("Qwen3-Next without a shared expert is not supported")
    return (
        _experts(hyper)
        | delta_net(hyper, QWEN_ARCHITECTURES["qwen3next"])
        | {
            "partial_rotary_factor": int(hyper("rope.dimension_count")) / _head_dim(hyper),
            "shared_expert_intermediate_size": shared,
            # llama.cpp makes every layer a mixture and renormalizes the chosen experts' weights
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "norm_topk_prob": True,
        }
    )


def _qwen3_next_rows(hyper: Hyper, key: str) -> tuple | None:
    """Where attn_qkv's and attn_gate's rows go in in_proj_qkvz: per key head, its q, k,
    then its value heads' v and z."""
    if key not in ("attn_qkv.weight", "attn_gate.weight"):
        return None
    key_heads, key_dim = int(hyper("ssm.group_count")), int(hyper("ssm.state_size"))
    per_head = int(hyper("ssm.inner_size")) // key_heads  # v (or z) rows per key head
    block = 2 * key_dim + 2 * per_head
    if key == "attn_gate.weight":
        return tuple((h * per_head, h * block + 2 * key_dim + per_head, per_head)
                     for h in range(key_heads))  # fmt: skip
    return tuple(
        segment
        for h in range(key_heads)
        for segment in (
            (h * key_dim, h * block, key_dim),
            ((key_heads + h) * key_dim, h * block + key_dim, key_dim),
            (2 * key_heads * key_dim + h * per_head, h * block + 2 * key_dim, per_head),
        )
    )


def _row(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape if len(shape) == 2 else (1, shape[-1])


def _unsqueeze_last(shape: tuple[int, ...]) -> tuple[int, ...]:
    """[channels, kernel] as mlx-lm's convolution weight [channels, kernel, 1]: mlx-lm's
    qwen3_next moves the axis only for checkpoints with unstacked experts."""
    return (*shape, 1)


QWEN_ARCHITECTURES: dict[str, Architecture] = {
    arch.gguf_name: arch
    for arch in (
        Architecture("qwen2", "qwen2", "Qwen2ForCausalLM", _LLAMA_LAYER, lambda h: {}),
        Architecture("qwen3", "qwen3", "Qwen3ForCausalLM", _LLAMA_LAYER | _QK_NORM, lambda h: {}),
        Architecture("qwen3moe", "qwen3_moe", "Qwen3MoeForCausalLM", _QWEN3_MOE_LAYER, _qwen3_moe),
        Architecture(
            "qwen3next",
            "qwen3_next",
            "Qwen3NextForCausalLM",
            _QWEN3_NEXT_LAYER,
            _qwen3_next,
            layer_params={"ssm_a": "linear_attn.A_log", "ssm_dt.bias": "linear_attn.dt_bias"},
            # The converter stored A = -exp(A_log) and squeezed the convolution's weight;
            # it added 1 to the norms, as mlx-lm does when it reads a checkpoint
            shapes={"ssm_conv1d.weight": _unsqueeze_last, "ffn_gate_inp_shexp.weight": _row},
            transforms={"ssm_a": lambda a: np.log(-a)},
            row_segments=_qwen3_next_rows,
        ),
    )
}
