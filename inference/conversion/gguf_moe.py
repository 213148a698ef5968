"""Mixture-of-experts families of their own: gpt-oss, GLM-4.5 and DeepSeek-V3 (multi-head
latent attention), the last two with sigmoid routing. Qwen3-MoE is with Qwen (gguf_qwen)."""

from __future__ import annotations

from inference.conversion.gguf_architecture import (
    _ATTENTION,
    _EXPERTS,
    _MLP,
    _QK_NORM,
    Architecture,
    Hyper,
)
from inference.conversion.gguf_config import _experts, _head_dim, _rope_scaling
from inference.conversion.gguf_file import UnsupportedGGUF

_SHARED_EXPERTS = {
    "ffn_gate_shexp": "mlp.shared_experts.gate_proj",
    "ffn_up_shexp": "mlp.shared_experts.up_proj",
    "ffn_down_shexp": "mlp.shared_experts.down_proj",
}

# GLM-4.5: leading dense layers, then experts with a shared one; sigmoid routing whose choice
# adds a per-expert bias (exp_probs_b), as DeepSeek-V3's.
_GLM4_MOE_LAYER = {
    "attn_norm": "input_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    **_ATTENTION,
    **_QK_NORM,
    **_MLP,
    **_EXPERTS,
    **_SHARED_EXPERTS,
}

# DeepSeek-V3's multi-head latent attention. llama.cpp's converter splits kv_b_proj into
# attn_k_b (per head, transposed) and attn_v_b: exactly mlx-lm's embed_q and unembed_out.
_DEEPSEEK2_LAYER = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",  # the Lite models: no query compression
    "attn_q_a": "self_attn.q_a_proj",
    "attn_q_a_norm": "self_attn.q_a_layernorm",
    "attn_q_b": "self_attn.q_b_proj",
    "attn_kv_a_mqa": "self_attn.kv_a_proj_with_mqa",
    "attn_kv_a_norm": "self_attn.kv_a_layernorm",
    "attn_k_b": "self_attn.embed_q",
    "attn_v_b": "self_attn.unembed_out",
    "attn_output": "self_attn.o_proj",
    **_MLP,
    **_EXPERTS,
    **_SHARED_EXPERTS,
}

_ROUTER_BIAS = {"exp_probs_b.bias": "mlp.gate.e_score_correction_bias"}

_GPT_OSS_LAYER = {
    "attn_norm": "input_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    **_ATTENTION,
    "ffn_gate_inp": "mlp.router",
    "ffn_gate_exps": "mlp.experts.gate_proj",
    "ffn_up_exps": "mlp.experts.up_proj",
    "ffn_down_exps": "mlp.experts.down_proj",
}

_SOFTMAX, _SIGMOID = 1, 2  # gguf's ExpertGatingFuncType


def _gpt_oss(hyper: Hyper) -> dict:
    # llama.cpp alternates a sliding layer and a global one, sliding first (its SWA pattern
    # of 2), which is also mlx-lm's default for gpt-oss; it is written out so that a file
    # with another count of layers cannot silently shift it.
    layers = int(hyper("block_count"))
    if hyper.get("attention.sliding_window_pattern") is not None:
        raise UnsupportedGGUF("gpt-oss with its own sliding window pattern is not supported")
    if float(hyper.get("rope.freq_base_swa", hyper("rope.freq_base", 10000.0))) != float(
        hyper("rope.freq_base", 10000.0)
    ):
        raise UnsupportedGGUF("gpt-oss with a rope base of its own for sliding layers")
    return {
        "num_local_experts": int(hyper("expert_count")),
        "num_experts_per_tok": int(hyper("expert_used_count")),
        "intermediate_size": int(hyper("expert_feed_forward_length")),
        "sliding_window": int(hyper("attention.sliding_window")),
        "layer_types": [
            "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)
        ],
    }


def _sigmoid_experts(hyper: Hyper, gating: int = _SIGMOID) -> dict:
    """DeepSeek-V3-style routing as mlx-lm's glm4_moe and deepseek_v3 read it. gating: what
    llama.cpp assumes of a file that does not say."""
    if int(hyper.get("expert_gating_func", gating)) != _SIGMOID:
        raise UnsupportedGGUF("only sigmoid expert routing is supported for this architecture")
    experts = _experts(hyper)
    shared = int(hyper.get("expert_shared_count", 0) or 0)
    first_moe = int(hyper.get("leading_dense_block_count", 0) or 0)
    if hyper.file.tensor(f"blk.{first_moe}.exp_probs_b.bias") is None:
        raise UnsupportedGGUF("sigmoid routing without its expert bias is not supported")
    return {
        "n_routed_experts": experts["num_experts"],
        "num_experts_per_tok": experts["num_experts_per_tok"],
        "moe_intermediate_size": experts["moe_intermediate_size"],
        "n_shared_experts": shared or None,
        "first_k_dense_replace": first_moe,
        # llama.cpp scales only by a factor it was given (0: none)
        "routed_scaling_factor": float(hyper.get("expert_weights_scale", 0.0) or 1.0),
        "norm_topk_prob": bool(hyper.get("expert_weights_norm", False)),
        # llama.cpp first keeps the best expert groups when the file has groups
        "n_group": int(hyper.get("expert_group_count", 1) or 1),
        "topk_group": int(hyper.get("expert_group_used_count", 1) or 1),
    }


def _glm4_moe(hyper: Hyper) -> dict:
    if any(hyper.get("rope.dimension_sections") or []):
        raise UnsupportedGGUF("GLM-4.5 with multimodal rope sections is not supported")
    file = hyper.file
    return _sigmoid_experts(hyper) | {
        "partial_rotary_factor": int(hyper("rope.dimension_count")) / _head_dim(hyper),
        "use_qk_norm": file.tensor("blk.0.attn_q_norm.weight") is not None,
        "attention_bias": file.tensor("blk.0.attn_q.bias") is not None,
        "rope_scaling": _rope_scaling(hyper),  # mlx-lm requires the key
    }


def _deepseek2(hyper: Hyper) -> dict:
    file = hyper.file
    if file.tensor("output.weight") is None:
        raise UnsupportedGGUF("deepseek2 with tied embeddings is not supported")
    if hyper.get("attention.temperature_scale"):
        raise UnsupportedGGUF("deepseek2 with attention temperature tuning is not supported")
    key_length = int(hyper("attention.key_length_mla"))
    rope = int(hyper("rope.dimension_count"))
    has_q_lora = file.tensor("blk.0.attn_q_a.weight") is not None
    # DeepSeek-V2's files may not say: llama.cpp takes them for softmax routing
    return _sigmoid_experts(hyper, gating=_SOFTMAX) | {
        # the file says one key/value head: the latent attention as llama.cpp computes it
        "num_key_value_heads": int(hyper("attention.head_count")),
        "head_dim": key_length,
        "kv_lora_rank": int(hyper("attention.kv_lora_rank")),
        "q_lora_rank": int(hyper("attention.q_lora_rank")) if has_q_lora else None,
        "qk_rope_head_dim": rope,
        "qk_nope_head_dim": key_length - rope,
        "v_head_dim": int(hyper("attention.value_length_mla")),
        "moe_layer_freq": 1,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
    }


MOE_ARCHITECTURES: dict[str, Architecture] = {
    arch.gguf_name: arch
    for arch in (
        Architecture(
            "gpt-oss",
            "gpt_oss",
            "GptOssForCausalLM",
            _GPT_OSS_LAYER,
            _gpt_oss,
            layer_params={"attn_sinks.weight": "self_attn.sinks"},
        ),
        Architecture(
            "glm4moe",
            "glm4_moe",
            "Glm4MoeForCausalLM",
            _GLM4_MOE_LAYER,
            _glm4_moe,
            layer_params=_ROUTER_BIAS,
            float_only=("ffn_gate_inp",),
        ),
        Architecture(
            "deepseek2",
            "deepseek_v3",
            "DeepseekV3ForCausalLM",
            _DEEPSEEK2_LAYER,
            _deepseek2,
            layer_params=_ROUTER_BIAS,
            float_only=("ffn_gate_inp",),
        ),
    )
}
