"""Writes a Hugging Face style checkpoint (config.json values and float32 tensors under their
Hugging Face names) as the GGUF file llama.cpp's converter (convert_hf_to_gguf.py, build 11434)
would make of it with `--outtype f32`: its tensor names (the gguf package's TensorNameMap, which
that converter uses), the metadata keys llama.cpp reads for the architecture, and the changes
the converter makes to the tensors (Llama's Q/K row permutation, Gemma's 1 + w norms, Llama 3's
rope_freqs, Phi-3's longrope factors, stacked experts, gpt-oss's MXFP4 blocks, DeepSeek's split
kv_b_proj, GLM's multi-token prediction layer, Mamba-2's A and reshapes (Granite's,
Nemotron-H's), Qwen3-Next's regrouped in_proj_qkvz, Qwen3.5's reordered value heads).
Written from the converter as a reference, for the import tests; F32 throughout (but gpt-oss's
MXFP4 experts), so that llama.cpp computes in float32 (but for the float16 keys and values of
its flash attention).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import gguf
import numpy as np
from gguf import GGUFValueType, GGUFWriter

Tensors = Iterator[tuple[str, np.ndarray]]


def write_gguf(
    path: Path,
    arch: str,
    config: dict,
    weights: Mapping[str, np.ndarray],
    tokenizer: dict,
    streamed: bool = False,
) -> Path:
    """arch: the GGUF architecture; config: the checkpoint's config.json; weights: its tensors
    by Hugging Face name; tokenizer: `tokenizer.ggml.*` metadata to copy. `streamed` (a
    checkpoint larger than memory, `weights` a mapping that makes each tensor when asked):
    each tensor goes to a spooled file as it is converted, matrices in float16."""
    if "text_config" in config:  # ModelBase.load_hparams: the text model's values win
        config = config | config["text_config"]
    if arch == "gemma3n":
        config = config["text_config"]  # mlx-lm's gemma3n nests its text model's config
    writer = GGUFWriter(str(path), arch, use_temp_file=streamed)
    # Not the architecture's name: llama.cpp gives Phi-3's special tokens (</s>...) attributes
    # when the name says "phi3", and SmolLM2's vocabulary has none of them.
    writer.add_name("synthetic checkpoint")
    HYPERPARAMETERS[arch](writer, config)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if streamed else gguf.LlamaFileType.ALL_F32)
    for key, value in tokenizer.items():
        _add_tokenizer_value(writer, key, value)
    for name, array in _converted_tensors(arch, config, weights):
        if array.dtype == np.uint8:  # MXFP4 blocks, as the converter copies gpt-oss's
            writer.add_tensor(name, array, raw_dtype=gguf.GGMLQuantizationType.MXFP4)
        else:
            dtype = np.float16 if streamed and _half(name, array) else np.float32
            writer.add_tensor(name, np.ascontiguousarray(array, dtype=dtype))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# What the converter keeps float32 in a float16 file besides vectors and norms
# (ModelBase.prepare_tensors): llama.cpp computes these in float32 only (ssm_conv aborts on
# a float16 convolution).
_FLOAT32_KINDS = (
    "FFN_GATE_INP",
    "FFN_GATE_INP_SHEXP",
    "POS_EMBD",
    "TOKEN_TYPES",
    "SSM_CONV1D",
    "SSM_CONV1D_Q",
    "SSM_CONV1D_K",
    "SSM_CONV1D_V",
    "SHORTCONV_CONV",
    "ALTUP_CORRECT_COEF",
    "ALTUP_PREDICT_COEF",
    "INDEXER_PROJ",
)


def _stem(name: str) -> str:
    """A GGUF tensor name without its block and `.weight`: blk.3.ssm_conv1d.weight -> ssm_conv1d."""
    return re.sub(r"^blk\.(\d+|\{bid\})\.", "", name).removesuffix(".weight")


_FLOAT32_STEMS = {
    _stem(gguf.TENSOR_NAMES[getattr(gguf.MODEL_TENSOR, kind)])
    for kind in _FLOAT32_KINDS
    if hasattr(gguf.MODEL_TENSOR, kind)
}


def _half(name: str, array: np.ndarray) -> bool:
    """Whether the converter writes this tensor in float16 in a float16 file."""
    if array.ndim < 2 or not name.endswith(".weight") or name.endswith("_norm.weight"):
        return False
    return _stem(name) not in _FLOAT32_STEMS


def _arch_enum(arch: str) -> gguf.MODEL_ARCH:
    return next(key for key, name in gguf.MODEL_ARCH_NAMES.items() if name == arch)


def _gguf_name(names: gguf.TensorNameMap, hf_name: str) -> str:
    name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
    if name is None:
        raise ValueError(f"llama.cpp's converter has no name for {hf_name}")
    return name


def _add_tokenizer_value(writer: GGUFWriter, key: str, value: object) -> None:
    # llama.cpp reads token ids as uint32 and token types as int32 (its type checks are strict).
    if isinstance(value, bool):
        writer.add_bool(key, value)
    elif isinstance(value, int):
        writer.add_uint32(key, value)
    elif isinstance(value, str):
        writer.add_string(key, value)
    elif isinstance(value, list) and value and isinstance(value[0], str):
        writer.add_key_value(key, value, GGUFValueType.ARRAY, GGUFValueType.STRING)
    elif isinstance(value, list):
        writer.add_key_value(key, value, GGUFValueType.ARRAY, GGUFValueType.INT32)
    else:
        raise TypeError(f"{key}: cannot write {type(value).__name__}")


# Metadata: what each converter class's set_gguf_parameters writes.


def _head_dim(config: dict) -> int:
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


def _dimensions(writer: GGUFWriter, config: dict) -> None:
    """The sizes every converter writes, Gemma 2's included."""
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])


def _text_model(writer: GGUFWriter, config: dict) -> None:
    """The base class (TextModel): the keys most architectures share."""
    _dimensions(writer, config)
    scaling = config.get("rope_scaling") or {}
    if scaling.get("rope_type", scaling.get("type")) == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(scaling["factor"])
    if scaling.get("rope_type", scaling.get("type")) == "yarn":
        _yarn(writer, scaling)
    # llama3 scaling becomes the rope_freqs tensor instead (see _llama_tensors)
    writer.add_rope_freq_base(config["rope_theta"])
    if "rope_local_base_freq" in config:
        writer.add_rope_freq_base_swa(config["rope_local_base_freq"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    if config.get("head_dim") is not None:
        writer.add_key_length(config["head_dim"])
        writer.add_value_length(config["head_dim"])
    if config.get("scoring_func") == "sigmoid":
        writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)


def _yarn(writer: GGUFWriter, scaling: dict) -> None:
    writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    writer.add_rope_scaling_factor(scaling["factor"])
    writer.add_rope_scaling_orig_ctx_len(scaling["original_max_position_embeddings"])
    if "beta_fast" in scaling:
        writer.add_rope_scaling_yarn_beta_fast(scaling["beta_fast"])
    if "beta_slow" in scaling:
        writer.add_rope_scaling_yarn_beta_slow(scaling["beta_slow"])


def _experts(writer: GGUFWriter, config: dict) -> None:
    """The base class's expert counts (num_experts or num_local_experts...)."""
    keys = ("num_local_experts", "num_experts", "n_routed_experts")
    count = next(config[key] for key in keys if key in config)
    writer.add_expert_count(count)
    used = ("num_experts_per_tok", "num_experts_per_token", "top_k_experts")
    writer.add_expert_used_count(next(config[key] for key in used if key in config))


def _qwen_moe(writer: GGUFWriter, config: dict) -> None:
    """Qwen2MoeModel's (Qwen3MoeModel inherits it): the base, then the experts' size."""
    _text_model(writer, config)
    _experts(writer, config)
    writer.add_expert_feed_forward_length(config["moe_intermediate_size"])


def _gpt_oss(writer: GGUFWriter, config: dict) -> None:
    _text_model(writer, config)
    _experts(writer, config)
    writer.add_sliding_window(config["sliding_window"])
    writer.add_expert_feed_forward_length(config["intermediate_size"])


def _glm4_moe(writer: GGUFWriter, config: dict) -> None:
    """Glm4MoeModel's: the base class's keys (expert counts and groups among them), then its
    own (its expert count again, which the writer overwrites with the same value). The
    multi-token prediction layers count as blocks."""
    mtp = config.get("num_nextn_predict_layers", 0)
    _text_model(writer, config | {"num_hidden_layers": config["num_hidden_layers"] + mtp})
    _experts(writer, config)
    if "n_group" in config:
        writer.add_expert_group_count(config["n_group"])
        writer.add_expert_group_used_count(config["topk_group"])
    rotary = config.get("partial_rotary_factor", 0.5)
    writer.add_rope_dimension_count(int(_head_dim(config) * rotary))
    writer.add_expert_feed_forward_length(config["moe_intermediate_size"])
    writer.add_expert_shared_count(config["n_shared_experts"])
    writer.add_leading_dense_block_count(config["first_k_dense_replace"])
    writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    writer.add_expert_weights_scale(config["routed_scaling_factor"])
    writer.add_expert_weights_norm(config["norm_topk_prob"])
    if mtp:
        writer.add_nextn_predict_layers(mtp)


def _deepseek2(writer: GGUFWriter, config: dict) -> None:
    """DeepseekV2Model's: one key/value head (the latent attention as multi-query attention),
    the base class, then the latent sizes and experts."""
    _text_model(writer, {**config, "num_key_value_heads": 1})
    _experts(writer, config)
    if "n_group" in config:
        writer.add_expert_group_count(config["n_group"])
        writer.add_expert_group_used_count(config["topk_group"])
    writer.add_leading_dense_block_count(config["first_k_dense_replace"])
    rank, rope = config["kv_lora_rank"], config["qk_rope_head_dim"]
    writer.add_vocab_size(config["vocab_size"])
    if config.get("q_lora_rank") is not None:
        writer.add_q_lora_rank(config["q_lora_rank"])
    writer.add_kv_lora_rank(rank)
    writer.add_key_length(rank + rope)
    writer.add_value_length(rank)
    writer.add_key_length_mla(config["qk_nope_head_dim"] + rope)
    writer.add_value_length_mla(config["v_head_dim"])
    writer.add_expert_feed_forward_length(config["moe_intermediate_size"])
    writer.add_expert_shared_count(config["n_shared_experts"])
    writer.add_expert_weights_scale(config["routed_scaling_factor"])
    if config.get("norm_topk_prob"):
        writer.add_expert_weights_norm(True)
    writer.add_rope_dimension_count(rope)
    scaling = config.get("rope_scaling") or {}
    if scaling.get("mscale_all_dim") is not None:
        writer.add_rope_scaling_yarn_log_mul(0.1 * scaling["mscale_all_dim"])


def _lfm2(writer: GGUFWriter, config: dict) -> None:
    """LFM2Model's: key/value heads only for attention layers, the base class, then the
    convolution's length and the feed-forward size after LFM2's adjustment (which replaces
    the base class's)."""
    kv_heads = [
        config["num_key_value_heads"] if kind != "conv" else 0 for kind in config["layer_types"]
    ]
    ff = config["block_ff_dim"]
    if config["block_auto_adjust_ff_dim"]:
        ff = int(2 * ff / 3)
        if config["block_ffn_dim_multiplier"] is not None:
            ff = int(config["block_ffn_dim_multiplier"] * ff)
        multiple = config["block_multiple_of"]
        ff = multiple * ((ff + multiple - 1) // multiple)
    base = {"num_key_value_heads": kv_heads, "rms_norm_eps": config["norm_eps"]}
    _text_model(writer, config | base | {"intermediate_size": ff})
    writer.add_vocab_size(config["vocab_size"])
    writer.add_shortconv_l_cache(config["conv_L_cache"])


def _granite_hybrid(writer: GGUFWriter, config: dict) -> None:
    """GraniteHybridModel's: GraniteMoeModel's keys (the base class's without head_dim,
    Llama's, Granite's multipliers), then Mamba-2's sizes, key/value heads only for attention
    layers (written twice, as the converter does), and without rope the longest context."""
    _text_model(writer, {key: value for key, value in config.items() if key != "head_dim"})
    if config.get("num_local_experts") is not None:
        writer.add_expert_count(config["num_local_experts"])
        writer.add_expert_used_count(config["num_experts_per_tok"])
    if config.get("shared_intermediate_size"):
        writer.add_expert_shared_feed_forward_length(config["shared_intermediate_size"])
    writer.add_vocab_size(config["vocab_size"])
    writer.add_rope_dimension_count(config["hidden_size"] // config["num_attention_heads"])
    writer.add_attention_scale(config["attention_multiplier"])
    writer.add_embedding_scale(config["embedding_multiplier"])
    writer.add_residual_scale(config["residual_multiplier"])
    writer.add_logit_scale(config["logits_scaling"])
    writer.add_ssm_conv_kernel(config["mamba_d_conv"])
    writer.add_ssm_state_size(config["mamba_d_state"])
    writer.add_ssm_group_count(config["mamba_n_groups"])
    writer.add_ssm_inner_size(config["mamba_expand"] * config["hidden_size"])
    writer.add_ssm_time_step_rank(config["mamba_n_heads"])
    kv_heads = config["num_key_value_heads"]
    writer.add_head_count_kv(
        [kv_heads if kind == "attention" else 0 for kind in config["layer_types"]]
    )
    use_rope = config.get("position_embedding_type") != "nope"
    writer.add_rope_scaling_finetuned(use_rope)
    if not use_rope:
        writer.add_context_length(2**20)


def _qwen3_next(writer: GGUFWriter, config: dict) -> None:
    """Qwen3NextModel's (converted with --no-mtp, the stand-in checkpoint having none):
    Qwen2MoeModel's keys, then the delta-net's sizes, the attention layers' interval and the
    rotated part of a head."""
    _qwen_moe(writer, config)
    writer.add_expert_shared_feed_forward_length(config["shared_expert_intermediate_size"])
    _delta_net(writer, config)


def _delta_net(writer: GGUFWriter, config: dict) -> None:
    """Qwen3NextModel's own keys: the delta-net's sizes, the attention layers' interval and
    the rotated part of a head."""
    writer.add_ssm_conv_kernel(config["linear_conv_kernel_dim"])
    writer.add_ssm_state_size(config["linear_key_head_dim"])
    writer.add_ssm_group_count(config["linear_num_key_heads"])
    writer.add_ssm_time_step_rank(config["linear_num_value_heads"])
    inner = config["linear_value_head_dim"] * config["linear_num_value_heads"]
    writer.add_ssm_inner_size(inner)
    writer.add_full_attention_interval(config.get("full_attention_interval", 4))
    rotary = config.get("partial_rotary_factor", 0.25)
    writer.add_rope_dimension_count(int(_head_dim(config) * rotary))


def _qwen35(writer: GGUFWriter, config: dict) -> None:
    """Qwen3_5TextModel's and Qwen3_5MoeTextModel's (with --no-mtp): Qwen3NextModel's keys
    (the experts' where the config has them), the rope from rope_parameters, each layer's kind
    from layer_types and the interleaved rope's sections (Qwen3.5's default when absent)."""
    rope = config["rope_parameters"]
    rotary = rope.get("partial_rotary_factor", 0.25)
    base = config | {"rope_theta": rope["rope_theta"], "partial_rotary_factor": rotary}
    _text_model(writer, base)
    if "num_experts" in config:
        _experts(writer, config)
        writer.add_expert_feed_forward_length(config["moe_intermediate_size"])
        writer.add_expert_shared_feed_forward_length(config["shared_expert_intermediate_size"])
    _delta_net(writer, base)
    if "layer_types" in config:
        recurrent = [kind == "linear_attention" for kind in config["layer_types"]]
        writer.add_array(f"{writer.arch}.attention.recurrent_layers", recurrent)
    sections = list(rope.get("mrope_section", [11, 11, 10]))
    writer.add_rope_dimension_sections((sections + [0] * 4)[:4])


def _nemotron_h(writer: GGUFWriter, config: dict) -> None:
    """NemotronHModel's (dense, Nemotron-H / Nemotron Nano 2): GraniteHybridModel's keys
    without Granite's multipliers (the checkpoint has none), the layer norm's epsilon as a
    plain norm's (the checkpoint's layer_norm_epsilon), Mamba-2's sizes from its own names,
    key/value heads only for attention layers and feed-forward sizes only for MLP layers."""
    pattern = list(config["hybrid_override_pattern"])
    base = {key: value for key, value in config.items() if key not in ("head_dim", "rms_norm_eps")}
    _dimensions(writer, base | {"num_hidden_layers": len(pattern)})
    writer.add_layer_norm_eps(config["layer_norm_epsilon"])
    writer.add_vocab_size(config["vocab_size"])
    writer.add_rope_dimension_count(config["hidden_size"] // config["num_attention_heads"])
    writer.add_ssm_conv_kernel(config["conv_kernel"])
    writer.add_ssm_state_size(config["ssm_state_size"])
    writer.add_ssm_group_count(config["n_groups"])
    writer.add_ssm_inner_size(config["mamba_num_heads"] * config["mamba_head_dim"])
    writer.add_ssm_time_step_rank(config["mamba_num_heads"])
    kv_heads = config["num_key_value_heads"]
    writer.add_head_count_kv([kv_heads if kind == "*" else 0 for kind in pattern])
    writer.add_rope_scaling_finetuned(False)
    writer.add_context_length(2**20)
    writer.add_key_length(config["head_dim"])
    writer.add_value_length(config["head_dim"])
    if "n_routed_experts" not in config:
        ff = config["intermediate_size"]
        writer.add_feed_forward_length([ff if kind == "-" else 0 for kind in pattern])
        return
    # the base class's expert keys, then NemotronHModel's own for its MoE arch
    _experts(writer, config)
    writer.add_expert_group_count(config["n_group"])
    writer.add_expert_group_used_count(config["topk_group"])
    ff = config["moe_intermediate_size"]
    writer.add_feed_forward_length([ff if kind == "E" else 0 for kind in pattern])
    writer.add_expert_feed_forward_length(ff)
    writer.add_expert_shared_feed_forward_length(config["moe_shared_expert_intermediate_size"])
    writer.add_expert_shared_count(config["n_shared_experts"])
    writer.add_expert_weights_norm(config["norm_topk_prob"])
    writer.add_expert_weights_scale(config["routed_scaling_factor"])
    if config.get("moe_latent_size") is not None:
        writer.add_moe_latent_size(config["moe_latent_size"])


def _mistral3(writer: GGUFWriter, config: dict) -> None:
    """Mistral3Model's Ministral3Model (LlamaModel's keys): the base class reads the rope from
    rope_parameters (YaRN's keys among them), then Ministral 3's YaRN attention scale and
    Llama 4's attention temperature."""
    rope = config["rope_parameters"]
    _llama(writer, config | {"rope_scaling": rope, "rope_theta": rope["rope_theta"]})
    if rope.get("rope_type") == "yarn":
        writer.add_rope_scaling_yarn_log_mul(rope["mscale_all_dim"])
        writer.add_attn_temperature_scale(rope["llama_4_scaling_beta"])


def _llama(writer: GGUFWriter, config: dict) -> None:
    _text_model(writer, config)
    writer.add_vocab_size(config["vocab_size"])
    writer.add_rope_dimension_count(_head_dim(config))


def _llama4(writer: GGUFWriter, config: dict) -> None:
    """Llama4Model's: LlamaModel's keys, the feed-forward length being the dense layers' (the
    converter swaps intermediate_size and intermediate_size_mlp), then the mixture layers'
    step and the experts' size; sliding_window 0 when every layer is global (MobileLLM)."""
    _llama(writer, config | {"intermediate_size": config["intermediate_size_mlp"]})
    _experts(writer, config)
    writer.add_interleave_moe_layer_step(config["interleave_moe_layer_step"])
    writer.add_expert_feed_forward_length(config["intermediate_size"])
    if "layer_types" in config and all(t == "full_attention" for t in config["layer_types"]):
        writer.add_sliding_window(0)


def _gemma2(writer: GGUFWriter, config: dict) -> None:
    # Gemma 2's converter does not call the base class: no rope base (llama.cpp's 10000).
    _dimensions(writer, config)
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_key_length(config["head_dim"])
    writer.add_value_length(config["head_dim"])
    writer.add_attn_logit_softcapping(config["attn_logit_softcapping"])
    writer.add_final_logit_softcapping(config["final_logit_softcapping"])
    writer.add_sliding_window(config["sliding_window"])


def _gemma3(writer: GGUFWriter, config: dict) -> None:
    _text_model(writer, config)
    if config.get("final_logit_softcapping"):
        writer.add_final_logit_softcapping(config["final_logit_softcapping"])
    if config.get("sliding_window_pattern") != 1:
        writer.add_sliding_window(config["sliding_window"])
    if "layer_types" in config:
        # not this converter's (it leaves llama.cpp's default of 6), but as its Gemma 3n and
        # Gemma 4 converters and other tools write it, and llama.cpp reads it for Gemma 3 too
        writer.add_sliding_window_pattern([t == "sliding_attention" for t in config["layer_types"]])


def _gemma4(writer: GGUFWriter, config: dict) -> None:
    """Gemma4Model's: Gemma3Model's keys (the base class's rope from rope_parameters' global
    entry, proportional: no scaling key), then the shared layers, the per-layer input's width,
    each layer's kind, the global and sliding head sizes, the double-wide MLP's sizes, the
    global layers' key/value heads and each kind's rotated dimensions."""
    rope = config["rope_parameters"]
    base = config | {"rope_theta": rope["full_attention"]["rope_theta"]}
    _gemma3(writer, base | {"rope_local_base_freq": rope["sliding_attention"]["rope_theta"]})
    shared = config["num_kv_shared_layers"]
    writer.add_shared_kv_layers(shared)
    writer.add_embedding_length_per_layer_input(config.get("hidden_size_per_layer_input") or 0)
    swa = [t == "sliding_attention" for t in config["layer_types"]]
    writer.add_sliding_window_pattern(swa)
    full, head = config["global_head_dim"], config["head_dim"]
    writer.add_key_length(full)
    writer.add_value_length(full)
    writer.add_key_length_swa(head)
    writer.add_value_length_swa(head)
    layers, ff = config["num_hidden_layers"], config["intermediate_size"]
    if config.get("use_double_wide_mlp"):
        first_shared = layers - shared
        writer.add_feed_forward_length([ff if i < first_shared else 2 * ff for i in range(layers)])
    if config.get("num_global_key_value_heads") is not None:
        kv, kv_full = config["num_key_value_heads"], config["num_global_key_value_heads"]
        writer.add_head_count_kv([kv if s else kv_full for s in swa])
    writer.add_rope_dimension_count(full)  # proportional: rope_freqs holds the rotated part
    writer.add_rope_dimension_count_swa(int(head * rope.get("partial_rotary_factor", 1.0)))
    if config.get("enable_moe_block"):  # the base class's counts, then the experts' size
        _experts(writer, config)
        writer.add_expert_feed_forward_length(config["moe_intermediate_size"])


def _gemma3n(writer: GGUFWriter, config: dict) -> None:
    """Gemma3NModel's: Gemma3Model's keys, then AltUp's, the per-layer input's width, the
    shared layers, the activation sparsity as the standard normal's quantiles and each layer's
    kind."""
    _gemma3(writer, config)
    writer.add_altup_active_idx(config["altup_active_idx"])
    writer.add_altup_num_inputs(config["altup_num_inputs"])
    writer.add_embedding_length_per_layer_input(config["hidden_size_per_layer_input"])
    writer.add_shared_kv_layers(config["num_kv_shared_layers"])
    quantile = statistics.NormalDist().inv_cdf
    pattern = config["activation_sparsity_pattern"]
    writer.add_activation_sparsity_scale([quantile(p) if p else 0.0 for p in pattern])
    writer.add_sliding_window_pattern([t == "sliding_attention" for t in config["layer_types"]])


def _phi3(writer: GGUFWriter, config: dict) -> None:
    rope_dims = _phi3_rope_dims(config)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_rope_scaling_orig_ctx_len(config["original_max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_dimension_count(rope_dims)
    writer.add_rope_freq_base(config["rope_theta"])
    writer.add_sliding_window(config.get("sliding_window") or 0)
    scaling = config.get("rope_scaling") or {}
    if scaling.get("long_factor"):
        scale = config["max_position_embeddings"] / config["original_max_position_embeddings"]
        original = config["original_max_position_embeddings"]
        factor = math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1 else 1.0
        writer.add_rope_scaling_attn_factors(factor)


def _phi3_rope_dims(config: dict) -> int:
    rotary = config.get("partial_rotary_factor", 1.0)
    return int(rotary * config["hidden_size"]) // config["num_attention_heads"]


HYPERPARAMETERS: dict[str, Callable[[GGUFWriter, dict], None]] = {
    "llama": _llama,
    "qwen2": _text_model,
    "qwen3": _text_model,
    "qwen3moe": _qwen_moe,
    "gpt-oss": _gpt_oss,
    "glm4moe": _glm4_moe,
    "deepseek2": _deepseek2,
    "lfm2": _lfm2,
    "granitehybrid": _granite_hybrid,
    "qwen3next": _qwen3_next,
    "qwen35": _qwen35,
    "qwen35moe": _qwen35,
    "nemotron_h": _nemotron_h,
    "mistral3": _mistral3,
    "nemotron_h_moe": _nemotron_h,
    "gemma2": _gemma2,
    "gemma3": _gemma3,
    "phi3": _phi3,
    "gemma4": _gemma4,
    "gemma3n": _gemma3n,
    "llama4": _llama4,
}


# Tensors: what each converter class's modify_tensors and generate_extra_tensors yield.


def _converted_tensors(arch: str, config: dict, weights: dict[str, np.ndarray]) -> Tensors:
    """(GGUF name, values) of every tensor the converter writes."""
    mtp = config.get("num_nextn_predict_layers", 0) if arch == "glm4moe" else 0
    names = gguf.get_tensor_name_map(_arch_enum(arch), config["num_hidden_layers"] + mtp)
    if arch == "gemma3n":
        weights = _gemma3n_stacked(weights)
    if arch == "gemma4":
        weights = _gemma4_checkpoint_experts(weights)
    for name, array in weights.items():
        if arch == "gemma3n":
            # the base class's filter_tensors and Gemma3NModel's
            name = name.replace("language_model.", "")
            name = f"{name}.weight" if name.endswith("_scale") else name
        if arch == "llama4":
            # the base class's filter_tensors; mlx-lm's experts are the checkpoint's gate_up_proj
            # split and down_proj, each transposed to [experts, out, in], as the converter does
            name = name.removeprefix("language_model.")
        if arch in ("qwen35", "qwen35moe"):
            name, array = _qwen35_tensor(name, array, config)
        if arch == "gemma2" and name == "lm_head.weight":
            continue  # Gemma 2's converter drops it: llama.cpp always ties
        if arch == "granitehybrid" and (split := _granite_moe_tensors(name, array)):
            yield from split
            continue
        if arch in ("llama", "mistral3", "granitehybrid", "nemotron_h", "nemotron_h_moe"):
            array = _llama_permute(name, array, config)
        if arch == "granitehybrid":
            name, array = _mamba2_tensor(name, array, config["mamba_n_groups"])
        if arch.startswith("nemotron_h"):
            name, array = _mamba2_tensor(name, array, config["n_groups"])
            # NemotronHModel stacks mixer.experts.<i>.up_proj (mlx-lm's fc1) and down_proj
            # (fc2) under the merged names of the base class
            for fc, projection in ((".fc1.", ".up_proj."), (".fc2.", ".down_proj.")):
                if ".mixer.switch_mlp" + fc in name:
                    layer = name.split(".")[2]
                    name = f"model.layers.{layer}.mlp.experts{projection}weight"
        qwen_hybrid = arch in ("qwen3next", "qwen35", "qwen35moe")
        if qwen_hybrid and (split := _qwen3_next_tensors(name, array, config)):
            yield from split
            continue
        if arch in ("gemma2", "gemma3") and name.endswith("norm.weight"):
            array = array + 1.0  # Gemma's RMSNorm scales by 1 + w; llama.cpp's by w
        # mlx-lm's SwitchGLU holds the experts stacked as the converter stacks them; its name
        # for the stack is the converter's merged `mlp.experts.<proj>`
        name = name.replace(".mlp.switch_mlp.", ".mlp.experts.")
        # the base class's filter_tensors, for every architecture
        name = name.replace("e_score_correction_bias", "e_score_correction.bias")
        if arch == "gpt-oss":
            name, array = _gpt_oss_tensor(name, array, _is_mxfp4(config))
        # mlx-lm holds kv_b_proj split as the converter splits it (k_b_proj transposed per
        # head, v_b_proj): embed_q and unembed_out are those two
        name = name.replace(".self_attn.embed_q.", ".self_attn.k_b_proj.")
        name = name.replace(".self_attn.unembed_out.", ".self_attn.v_b_proj.")
        if arch == "gemma4" and (renamed := _gemma4_tensor(name)):
            if renamed.startswith("blk."):  # named by modify_tensors itself
                yield renamed, array
                continue
            name = renamed
        if arch == "lfm2" and name.endswith("conv.conv.weight"):
            # mlx-lm's [hidden, kernel, 1] is the checkpoint's [hidden, 1, kernel], which
            # the converter squeezes to [hidden, kernel]
            array = array[..., 0]
        yield _gguf_name(names, name), array
    if mtp:
        yield from _glm4_mtp_layers(names, config, weights)
    if arch in ("llama", "llama4"):
        yield from _llama3_rope_freqs(config)
    if arch == "phi3":
        yield from _phi3_rope_factors(config)
    if arch == "gemma4":
        yield from _gemma4_extra_tensors(names, config)


def _is_mxfp4(config: dict) -> bool:
    """gpt-oss as OpenAI publishes it: experts in MXFP4 blocks (not a bfloat16 copy)."""
    return (config.get("quantization_config") or {}).get("quant_method") == "mxfp4"


def _gpt_oss_tensor(name: str, array: np.ndarray, mxfp4: bool) -> tuple[str, np.ndarray]:
    """The converter names the sinks `.weight` and copies the experts' MXFP4 blocks (the
    checkpoint's, which mlx-lm's mxfp4 mode packs alike) into GGML's MXFP4 blocks. Float
    experts it transposes from the checkpoint's [in, out] and splits from gate_up's
    alternate rows: mlx-lm's gate_proj and up_proj as they are."""
    if name.endswith(".sinks"):
        return f"{name}.weight", array
    if mxfp4 and ".mlp.experts." in name and name.endswith(".weight"):
        return name, _mxfp4_blocks(array)
    return name, array


def _mxfp4_blocks(weights: np.ndarray) -> np.ndarray:
    """GptOssModel.repack_mxfp4: the checkpoint's blocks (weight 2i in the low nibble of byte
    i, 2i+1 in the high one; mx.quantize's mxfp4 packs alike) through its
    transform_nibble_layout (GGML's byte j: weight j low, j + 16 high), the scale byte first.
    The weights must be MXFP4 values already: mx.quantize of them is then exact."""
    import mlx.core as mx

    packed, scales = mx.quantize(mx.array(weights), group_size=32, bits=4, mode="mxfp4")
    blocks = np.array(packed).view(np.uint8).reshape(*weights.shape[:-1], -1, 16)
    codes = np.stack([blocks & 0x0F, blocks >> 4], axis=-1).reshape(*blocks.shape[:-1], 32)
    ggml = codes[..., :16] | (codes[..., 16:] << 4)
    raw = np.concatenate([np.array(scales)[..., None], ggml], axis=-1)
    return raw.reshape(*weights.shape[:-1], -1).astype(np.uint8)


def _granite_moe_tensors(name: str, array: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """GraniteMoeModel's: the checkpoint's input_linear (gate rows, then up rows) split in
    two, for the experts and the shared expert; mlx-lm holds the experts' split already."""
    parts = name.split(".")
    if "block_sparse_moe.switch_mlp" in name:
        projection = parts[-2].removesuffix("_proj")
        return [(f"blk.{parts[2]}.ffn_{projection}_exps.weight", array)]
    if name.endswith("shared_mlp.input_linear.weight"):
        gate, up = np.split(array, 2, axis=0)
        return [(f"blk.{parts[2]}.ffn_gate_shexp.weight", gate),
                (f"blk.{parts[2]}.ffn_up_shexp.weight", up)]  # fmt: skip
    return []


def _qwen3_next_tensors(name: str, array: np.ndarray, config: dict) -> list[tuple[str, np.ndarray]]:
    """Qwen3NextModel.modify_tensors: A stored as -exp(A_log), the time step's bias named as
    a projection's, the convolution squeezed (mlx-lm's [channels, kernel, 1]), and
    in_proj_qkvz ([q, k, v, z] per key head) regrouped into attn_qkv and attn_gate. Its
    norms + 1 are mlx-lm's own: mlx-lm adds 1 to a checkpoint's when it reads it."""
    layer = name.split(".")[2] if name.startswith("model.layers.") else None
    if name.endswith(".A_log"):
        return [(f"blk.{layer}.ssm_a", -np.exp(array))]
    if name.endswith(".dt_bias"):
        return [(f"blk.{layer}.ssm_dt.bias", array)]
    if name.endswith("linear_attn.conv1d.weight"):
        return [(f"blk.{layer}.ssm_conv1d.weight", array[..., 0])]
    if not name.endswith("in_proj_qkvz.weight"):
        return []
    key_heads, key_dim = config["linear_num_key_heads"], config["linear_key_head_dim"]
    per_head = config["linear_num_value_heads"] // key_heads * config["linear_value_head_dim"]
    grouped = array.T.reshape(-1, key_heads, 2 * key_dim + 2 * per_head)
    q, k, v, z = np.split(grouped, np.cumsum([key_dim, key_dim, per_head]), axis=-1)
    hidden = array.shape[1]
    qkv = np.concatenate([t.reshape(hidden, -1) for t in (q, k, v)], axis=-1).T
    gate = z.reshape(hidden, -1).T
    return [(f"blk.{layer}.attn_qkv.weight", qkv), (f"blk.{layer}.attn_gate.weight", gate)]


def _qwen35_tensor(name: str, array: np.ndarray, config: dict) -> tuple[str, np.ndarray]:
    """The text model's names (mlx-lm's are under language_model.), and
    _LinearAttentionVReorderBase's change: with more value heads than key heads, the value
    heads from grouped by key head to tiled, in every tensor with a value head axis. A, the
    time step's bias and the convolution then change as Qwen3-Next's (_qwen3_next_tensors)."""
    name = name.removeprefix("language_model.")
    keys, values = config["linear_num_key_heads"], config["linear_num_value_heads"]
    if ".linear_attn." not in name or keys == values:
        return name, array
    width, qk = config["linear_value_head_dim"], 2 * keys * config["linear_key_head_dim"]
    if name.endswith((".in_proj_qkv.weight", ".conv1d.weight")):  # q and k stay
        return name, np.concatenate([array[:qk], _tiled(array[qk:], 0, keys, width)])
    if name.endswith(".in_proj_z.weight"):
        return name, _tiled(array, 0, keys, width)
    if name.endswith((".in_proj_b.weight", ".in_proj_a.weight", ".A_log", ".dt_bias")):
        return name, _tiled(array, 0, keys, 1)
    if name.endswith(".out_proj.weight"):
        return name, _tiled(array, 1, keys, width)
    return name, array


def _tiled(array: np.ndarray, axis: int, keys: int, width: int) -> np.ndarray:
    """Runs of `width` along axis, grouped [k0 v0, k0 v1, k1 v0, k1 v1], made tiled
    [k0 v0, k1 v0, k0 v1, k1 v1]."""
    moved = np.moveaxis(array, axis, 0)
    grouped = moved.reshape(keys, -1, width, *moved.shape[1:])
    return np.moveaxis(grouped.swapaxes(0, 1).reshape(moved.shape), 0, axis)


def _mamba2_tensor(name: str, array: np.ndarray, groups: int) -> tuple[str, np.ndarray]:
    """Mamba2Model's changes: the time step's bias named as a projection's, A stored as
    -exp(A_log), A and D unsqueezed, the gated norm split by group, the convolution squeezed
    (mlx-lm's [channels, kernel, 1] is the checkpoint's [channels, 1, kernel])."""
    if name.endswith(".dt_bias"):
        return name.replace(".dt_bias", ".dt_proj.bias"), array
    if name.endswith(".A_log"):
        return name, -np.exp(array)[:, None]
    if name.endswith((".mamba.D", ".mixer.D")):
        return name, array[:, None]
    if name.endswith((".mamba.norm.weight", ".mixer.norm.weight")):
        return name, array.reshape(groups, -1)
    if name.endswith(".conv1d.weight"):
        return name, array[..., 0]
    return name, array


def _glm4_mtp_layers(names: gguf.TensorNameMap, config: dict, weights: dict) -> Tensors:
    """GLM-4.5's multi-token prediction layers, which the converter appends as blocks: a
    decoder layer (the last one's weights stand in) and its own projection and norms."""
    last, hidden = config["num_hidden_layers"] - 1, config["hidden_size"]
    rng = np.random.default_rng(0)
    layers = config["num_hidden_layers"]
    for index in range(layers, layers + config["num_nextn_predict_layers"]):
        for name, array in weights.items():
            if name.startswith(f"model.layers.{last}."):
                name = name.replace(f".{last}.", f".{index}.", 1)
                name = name.replace(".mlp.switch_mlp.", ".mlp.experts.")
                name = name.replace("e_score_correction_bias", "e_score_correction.bias")
                yield _gguf_name(names, name), array
        projection = rng.standard_normal((hidden, 2 * hidden), dtype=np.float32) / hidden
        yield _gguf_name(names, f"model.layers.{index}.eh_proj.weight"), projection
        for norm in ("enorm", "hnorm", "shared_head.norm"):
            yield _gguf_name(names, f"model.layers.{index}.{norm}.weight"), np.ones(hidden)


def _llama_permute(name: str, array: np.ndarray, config: dict) -> np.ndarray:
    """Hugging Face's Llama rotates the two halves of each head; llama.cpp's Llama rotates
    adjacent pairs, so the converter interleaves the halves of Q's and K's rows."""
    if name.endswith(("q_proj.weight", "q_proj.bias")):
        heads = config["num_attention_heads"]
    elif name.endswith(("k_proj.weight", "k_proj.bias")):
        heads = config["num_key_value_heads"]
    else:
        return array
    half = array.shape[0] // heads // 2
    pairs = array.reshape(heads, 2, half, *array.shape[1:]).swapaxes(1, 2)
    return pairs.reshape(array.shape)


def _llama3_rope_freqs(config: dict) -> Tensors:
    """Llama 3's rope_scaling as the per-frequency divisors llama.cpp applies."""
    scaling = config.get("rope_scaling") or {}
    if scaling.get("rope_type") != "llama3":
        return
    dims = _head_dim(config)
    exponents = np.arange(0, dims, 2, dtype=np.float32) / dims
    wavelen = 2 * math.pi * np.float32(config["rope_theta"]) ** exponents
    factor, old = scaling["factor"], scaling["original_max_position_embeddings"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    with np.errstate(divide="ignore", invalid="ignore"):  # Llama 4's: no band (low == high)
        smooth = (old / wavelen - low) / (high - low)
        middle = 1 / ((1 - smooth) / factor + smooth)
    divisors = np.where(wavelen < old / high, 1.0, np.where(wavelen > old / low, factor, middle))
    yield "rope_freqs.weight", divisors.astype(np.float32)


def _phi3_rope_factors(config: dict) -> Tensors:
    scaling = config.get("rope_scaling") or {}
    if not scaling.get("long_factor"):
        return
    expected = _phi3_rope_dims(config) // 2
    for kind in ("long", "short"):
        factors = np.asarray(scaling[f"{kind}_factor"], dtype=np.float32)
        if factors.shape != (expected,):
            raise ValueError(f"{kind}_factor must have {expected} values")
        yield f"rope_factors_{kind}.weight", factors


def _gemma4_extra_tensors(names: gguf.TensorNameMap, config: dict) -> Tensors:
    """Gemma4Model.generate_extra_tensors' rope_freqs (the global layers' proportional rope:
    divisor 1 for the rotated frequencies, 1e30 for the others), and the shared layers'
    k_proj, v_proj and k_norm, which Hugging Face's checkpoints keep and mlx-lm's model
    (its sanitize drops them) lacks: stand-ins, which llama.cpp loads and never reads."""
    full = config["global_head_dim"]
    rotated = int(full * config["rope_parameters"]["full_attention"]["partial_rotary_factor"] / 2)
    values = [1.0] * rotated + [1e30] * (full // 2 - rotated)
    yield "rope_freqs.weight", np.array(values, dtype=np.float32)
    rng = np.random.default_rng(1)
    layers, hidden = config["num_hidden_layers"], config["hidden_size"]
    for index in range(layers - config["num_kv_shared_layers"], layers):
        is_full = config["layer_types"][index] == "full_attention"
        head = full if is_full else config["head_dim"]
        keys_as_values = is_full and config.get("attention_k_eq_v")
        kv = config["num_global_key_value_heads" if keys_as_values else "num_key_value_heads"]
        for projection in ["k_proj"] if keys_as_values else ["k_proj", "v_proj"]:
            values = rng.standard_normal((kv * head, hidden), dtype=np.float32)
            name = f"model.layers.{index}.self_attn.{projection}.weight"
            yield _gguf_name(names, name), values / np.sqrt(hidden)
        name = f"model.layers.{index}.self_attn.k_norm.weight"
        yield _gguf_name(names, name), np.ones(head, dtype=np.float32)


def _gemma4_checkpoint_experts(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Hugging Face's Gemma 4 experts, as mlx-lm's sanitize reads them: gate_up_proj
    [experts, 2 x size, hidden] (each expert's gate rows, then its up rows) and down_proj,
    without a .weight."""
    out = {}
    for name, array in weights.items():
        stem, _, projection = name.rpartition(".experts.switch_glu.")
        if projection == "gate_proj.weight":
            up = weights[f"{stem}.experts.switch_glu.up_proj.weight"]
            out[f"{stem}.experts.gate_up_proj"] = np.concatenate([array, up], axis=-2)
        elif projection == "down_proj.weight":
            out[f"{stem}.experts.down_proj"] = array
        elif projection != "up_proj.weight":
            out[name] = array
    return out


def _gemma4_tensor(name: str) -> str | None:
    """Gemma4Model's filter_tensors (.weight after the layer scalar and the experts) and
    modify_tensors (the router's scale and the per-expert scale as ffn_gate_inp's and
    ffn_down_exps' .scale); None for a name it leaves."""
    layer = name.split(".")[2] if name.startswith("model.layers.") else None
    if name.endswith("router.scale"):
        return f"blk.{layer}.ffn_gate_inp.scale"
    if name.endswith("router.per_expert_scale"):
        return f"blk.{layer}.ffn_down_exps.scale"
    if name.endswith((".layer_scalar", ".experts.gate_up_proj", ".experts.down_proj")):
        return f"{name}.weight"
    return None


def _gemma3n_stacked(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Gemma3NModel.modify_tensors stacks AltUp's projections (three each, in order)."""
    out = {}
    for name, array in weights.items():
        stem, _, rest = name.rpartition(".altup_")
        if rest.startswith(("projections.", "unembed_projections.")):
            kind = rest.split(".")[0]
            stacked = f"{stem}.altup_{kind}.weight"
            if stacked not in out:
                parts = [n for n in weights if n.startswith(f"{stem}.altup_{kind}.")]
                parts.sort(key=lambda n: int(n.split(".")[-2]))
                out[stacked] = np.stack([weights[n] for n in parts])
            continue
        out[name] = array
    return out
