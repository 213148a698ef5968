"""Hybrids of attention with recurrent layers: LFM2 (short convolutions), Granite 4.0-H and
Nemotron-H (Mamba-2, Nemotron's with experts too). Qwen3-Next's delta-net is with Qwen
(gguf_qwen)."""

from __future__ import annotations

import math

import numpy as np

from inference.conversion.gguf_architecture import _ATTENTION, _MLP, Architecture, Hyper, _layer_key
from inference.conversion.gguf_config import (
    _experts,
    _head_dim,
    _per_layer,
    attention_layers,
    main_layers,
)
from inference.conversion.gguf_file import GGUFFile, UnsupportedGGUF

_LFM2_LAYER = {
    "attn_norm": "operator_norm",
    "ffn_norm": "ffn_norm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.out_proj",
    "attn_q_norm": "self_attn.q_layernorm",
    "attn_k_norm": "self_attn.k_layernorm",
    "shortconv.conv": "conv.conv",
    "shortconv.in_proj": "conv.in_proj",
    "shortconv.out_proj": "conv.out_proj",
    "ffn_gate": "feed_forward.w1",
    "ffn_down": "feed_forward.w2",
    "ffn_up": "feed_forward.w3",
}

# Granite 4.0-H: Mamba-2 layers and attention layers, each followed by the feed-forward.
_GRANITE_HYBRID_LAYER = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    **_ATTENTION,
    **_MLP,
    "ssm_in": "mamba.in_proj",
    "ssm_conv1d": "mamba.conv1d",
    "ssm_norm": "mamba.norm",
    "ssm_out": "mamba.out_proj",
    "ffn_gate_inp": "block_sparse_moe.router.layer",
    "ffn_gate_exps": "block_sparse_moe.switch_mlp.gate_proj",
    "ffn_up_exps": "block_sparse_moe.switch_mlp.up_proj",
    "ffn_down_exps": "block_sparse_moe.switch_mlp.down_proj",
    # mlx-lm's shared expert has gate and up in one projection, gate first
    "ffn_gate_shexp": "shared_mlp.input_linear",
    "ffn_up_shexp": "shared_mlp.input_linear",
    "ffn_down_shexp": "shared_mlp.output_linear",
}

_MAMBA2_PARAMS = {"ssm_a": "mamba.A_log", "ssm_d": "mamba.D", "ssm_dt.bias": "mamba.dt_bias"}

# Nemotron-H: each layer one of a Mamba-2 mixer, attention (no rope) or a squared-ReLU MLP,
# each under one norm; mlx-lm names the model "backbone" and every layer's module "mixer".
_NEMOTRON_H_LAYER = {
    "attn_norm": "norm",
    "attn_q": "mixer.q_proj",
    "attn_k": "mixer.k_proj",
    "attn_v": "mixer.v_proj",
    "attn_output": "mixer.o_proj",
    "ffn_up": "mixer.up_proj",
    "ffn_down": "mixer.down_proj",
    "ssm_in": "mixer.in_proj",
    "ssm_conv1d": "mixer.conv1d",
    "ssm_norm": "mixer.norm",
    "ssm_out": "mixer.out_proj",
}

# Nemotron 3 Nano: Mamba-2 and attention layers, and mixtures of squared-ReLU experts (up and
# down only) with a shared expert, sigmoid routing with a bias on the choice.
_NEMOTRON_H_MOE_LAYER = _NEMOTRON_H_LAYER | {
    "ffn_gate_inp": "mixer.gate",
    "ffn_up_exps": "mixer.switch_mlp.fc1",
    "ffn_down_exps": "mixer.switch_mlp.fc2",
    "ffn_up_shexp": "mixer.shared_experts.up_proj",
    "ffn_down_shexp": "mixer.shared_experts.down_proj",
    "ffn_latent_down": "mixer.fc1_latent_proj",  # Nemotron 3 Super's latent experts
    "ffn_latent_up": "mixer.fc2_latent_proj",
}

_NEMOTRON_H_PARAMS = {"ssm_a": "mixer.A_log", "ssm_d": "mixer.D", "ssm_dt.bias": "mixer.dt_bias"}


def _flat(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (math.prod(shape),)


def _unsqueeze_1(shape: tuple[int, ...]) -> tuple[int, ...]:
    """[rows, kernel] back to the checkpoint's convolution weight [rows, 1, kernel]."""
    return (shape[0], 1, *shape[1:])


def _any_layer_has(file: GGUFFile, key: str) -> bool:
    return any(_layer_key(tensor.name) == key for tensor in file.tensors)


# Mamba2Model's changes (Granite's, Nemotron's): A and D unsqueezed to [heads, 1], A stored
# as -exp(A_log), the gated norm's weight split by group and the convolution's squeezed. The
# converter also permuted Q's and K's rows for a rope these models' attention does not have,
# which leaves their products unchanged.
_MAMBA2_SHAPES = {
    "ssm_a": _flat,
    "ssm_d": _flat,
    "ssm_norm.weight": _flat,
    "ssm_conv1d.weight": _unsqueeze_1,
}

_MAMBA2_TRANSFORMS = {"ssm_a": lambda a: np.log(-a)}

_NEMOTRON_H_TOP = {"token_embd": "backbone.embeddings", "output_norm": "backbone.norm_f"}


def _lfm2(hyper: Hyper) -> dict:
    if int(hyper.get("attention.sliding_window", 0) or 0):
        raise UnsupportedGGUF("LFM2 with a sliding window is not supported")
    hidden, heads = int(hyper("embedding_length")), int(hyper("attention.head_count"))
    if _head_dim(hyper) != hidden // heads:
        raise UnsupportedGGUF("LFM2 with a head size other than hidden / heads")
    ff = int(hyper("feed_forward_length"))
    return {
        "layer_types": [
            "full_attention" if attends else "conv" for attends in attention_layers(hyper)
        ],
        "norm_eps": float(hyper("attention.layer_norm_rms_epsilon")),
        "conv_L_cache": int(hyper("shortconv.l_cache")),
        "conv_bias": hyper.file.tensor("blk.0.shortconv.in_proj.bias") is not None,
        # the converter stored the size after LFM2's own adjustment: none to do again
        "block_dim": hidden,
        "block_ff_dim": ff,
        "block_auto_adjust_ff_dim": False,
        "block_multiple_of": 1,
        # unused without the adjustment; transformers' config (AutoTokenizer reads it) wants
        # a number, not None
        "block_ffn_dim_multiplier": 1.0,
    }


def _granite_hybrid(hyper: Hyper) -> dict:
    file = hyper.file
    if hyper.get("rope.scaling.finetuned", True):
        # llama.cpp's switch for rope: Bamba's, whose Q/K rows the converter permuted
        raise UnsupportedGGUF("granitehybrid with rope (Bamba) is not supported")
    groups, inner = int(hyper("ssm.group_count")), int(hyper("ssm.inner_size"))
    if groups != 1:
        # llama.cpp normalizes the gated output per group, mlx-lm over all of it
        raise UnsupportedGGUF("granitehybrid with more than one Mamba group is not supported")
    heads = int(hyper("ssm.time_step_rank"))
    hidden, attention_heads = int(hyper("embedding_length")), int(hyper("attention.head_count"))
    if _head_dim(hyper) != hidden // attention_heads:
        raise UnsupportedGGUF("granitehybrid with a head size other than hidden / heads")
    return {
        "layer_types": ["attention" if attends else "mamba" for attends in attention_layers(hyper)],
        "position_embedding_type": "nope",
        "embedding_multiplier": float(hyper.get("embedding_scale", 0.0) or 1.0),
        "residual_multiplier": float(hyper.get("residual_scale", 0.0) or 1.0),
        "logits_scaling": float(hyper.get("logit_scale", 0.0) or 1.0),
        "attention_multiplier": float(
            hyper.get("attention.scale", 0.0) or _head_dim(hyper) ** -0.5
        ),
        "attention_bias": _any_layer_has(file, "attn_q.bias"),
        "mamba_n_heads": heads,
        "mamba_d_head": inner // heads,
        "mamba_d_state": int(hyper("ssm.state_size")),
        "mamba_d_conv": int(hyper("ssm.conv_kernel")),
        "mamba_n_groups": groups,
        "mamba_conv_bias": _any_layer_has(file, "ssm_conv1d.bias"),
        "mamba_proj_bias": _any_layer_has(file, "ssm_in.bias"),
        # llama.cpp puts no bounds on the time step
        "time_step_limit": [0.0, 1e30],
    } | _granite_experts(hyper)


def _granite_experts(hyper: Hyper) -> dict:
    if not int(hyper.get("expert_count", 0) or 0):
        return {}
    shared = int(hyper.get("expert_shared_feed_forward_length", 0) or 0)
    if not shared:
        raise UnsupportedGGUF("granitehybrid with experts but no shared expert")
    return {
        "num_local_experts": int(hyper("expert_count")),
        "num_experts_per_tok": int(hyper("expert_used_count")),
        "shared_intermediate_size": shared,
    }


def _nemotron_h(hyper: Hyper) -> dict:
    file = hyper.file
    if file.tensor("output.weight") is None:
        raise UnsupportedGGUF(f"{hyper.arch} with tied embeddings is not supported")
    scale = float(hyper.get("attention.scale", 0.0) or 0.0)
    if scale and not math.isclose(scale, _head_dim(hyper) ** -0.5, rel_tol=1e-6):
        raise UnsupportedGGUF(f"{hyper.arch} with an attention scale of its own is not supported")
    moe = hyper.arch == "nemotron_h_moe"
    if not moe and hyper.get("expert_count"):
        raise UnsupportedGGUF("nemotron_h with experts is not supported (nemotron_h_moe is)")
    heads, inner = int(hyper("ssm.time_step_rank")), int(hyper("ssm.inner_size"))
    layers = main_layers(file, HYBRID_ARCHITECTURES[hyper.arch])  # not the multi-token prediction's
    kinds = zip(attention_layers(hyper), _per_layer(hyper, "feed_forward_length"), strict=True)
    config = {
        # a layer with key/value heads attends, one with a feed-forward size is an MLP (or a
        # mixture), the others are Mamba-2: llama.cpp's rule
        "hybrid_override_pattern": [
            "*" if attends else ("E" if moe else "-") if ff else "M" for attends, ff in kinds
        ][:layers],
        "layer_norm_epsilon": float(
            hyper.get("attention.layer_norm_rms_epsilon") or hyper("attention.layer_norm_epsilon")
        ),
        "attention_bias": _any_layer_has(file, "attn_q.bias"),
        "mlp_bias": _any_layer_has(file, "ffn_up.bias"),
        "mamba_num_heads": heads,
        "mamba_head_dim": inner // heads,
        "mamba_proj_bias": _any_layer_has(file, "ssm_in.bias"),
        "use_bias": _any_layer_has(file, "ssm_in.bias"),
        "use_conv_bias": _any_layer_has(file, "ssm_conv1d.bias"),
        "ssm_state_size": int(hyper("ssm.state_size")),
        "conv_kernel": int(hyper("ssm.conv_kernel")),
        # llama.cpp and mlx-lm both normalize the gated output per group
        "n_groups": int(hyper("ssm.group_count")),
    }
    return config | (_nemotron_h_experts(hyper) if moe else {})


def _nemotron_h_experts(hyper: Hyper) -> dict:
    """llama.cpp routes Nemotron's experts by sigmoid, choosing with the bias (exp_probs_b),
    renormalizing if told and scaling by a factor it was given, as mlx-lm's MoEGate."""
    experts = _experts(hyper)  # refuses per-layer sizes (the Puzzle models)
    if isinstance(hyper("expert_used_count"), list):
        raise UnsupportedGGUF("per-layer expert counts are not supported yet")
    if not int(hyper.get("expert_shared_count", 0) or 0):
        raise UnsupportedGGUF("nemotron_h_moe without a shared expert is not supported")
    groups = int(hyper.get("expert_group_count", 1) or 1)
    return {
        "n_routed_experts": experts["num_experts"],
        "num_experts_per_tok": experts["num_experts_per_tok"],
        "moe_intermediate_size": experts["moe_intermediate_size"],
        "moe_shared_expert_intermediate_size": int(hyper("expert_shared_feed_forward_length")),
        "n_shared_experts": int(hyper("expert_shared_count")),
        "norm_topk_prob": bool(hyper.get("expert_weights_norm", False)),
        "routed_scaling_factor": float(hyper.get("expert_weights_scale", 0.0) or 1.0),
        "n_group": groups,
        "topk_group": int(hyper.get("expert_group_used_count", groups) or groups),
        "moe_latent_size": int(hyper("moe_latent_size")) if hyper.get("moe_latent_size") else None,
    }


HYBRID_ARCHITECTURES: dict[str, Architecture] = {
    arch.gguf_name: arch
    for arch in (
        Architecture(
            "lfm2",
            "lfm2",
            "Lfm2ForCausalLM",
            _LFM2_LAYER,
            _lfm2,
            tied_only=True,
            # LFM2's final norm, which llama.cpp names after the embeddings
            top_names={"token_embd_norm": "model.embedding_norm"},
            shapes={"shortconv.conv.weight": _unsqueeze_1},
            hybrid=True,
        ),
        Architecture(
            "granitehybrid",
            "granitemoehybrid",
            "GraniteMoeHybridForCausalLM",
            _GRANITE_HYBRID_LAYER,
            _granite_hybrid,
            layer_params=_MAMBA2_PARAMS,
            shapes=_MAMBA2_SHAPES,
            transforms=_MAMBA2_TRANSFORMS,
            hybrid=True,
            parts={"ffn_gate_shexp": 0, "ffn_up_shexp": 1},
        ),
        Architecture(
            "nemotron_h",
            "nemotron_h",
            "NemotronHForCausalLM",
            _NEMOTRON_H_LAYER,
            _nemotron_h,
            layer_prefix="backbone.layers",
            top_names=_NEMOTRON_H_TOP,
            layer_params=_NEMOTRON_H_PARAMS,
            shapes=_MAMBA2_SHAPES,
            transforms=_MAMBA2_TRANSFORMS,
            hybrid=True,
        ),
        Architecture(
            "nemotron_h_moe",
            "nemotron_h",
            "NemotronHForCausalLM",
            _NEMOTRON_H_MOE_LAYER,
            _nemotron_h,
            layer_prefix="backbone.layers",
            top_names=_NEMOTRON_H_TOP,
            layer_params=_NEMOTRON_H_PARAMS
            | {"exp_probs_b.bias": "mixer.gate.e_score_correction_bias"},
            float_only=("ffn_gate_inp",),
            shapes=_MAMBA2_SHAPES,
            transforms=_MAMBA2_TRANSFORMS,
            hybrid=True,
        ),
    )
}
