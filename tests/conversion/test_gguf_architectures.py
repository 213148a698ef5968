"""Every GGUF architecture the importer maps, end to end: a small random model built from
mlx-lm's own model class is written as llama.cpp's converter would write that checkpoint
(tests/support/gguf_writer.py), imported with convert_gguf and loaded by mlx-lm. Its logits must
be the original's (float32 throughout), and its greedy continuation llama.cpp's on the same file
(tests/tools/llama_reference.cpp): llama.cpp arbitrates whether the writer or the importer is
wrong when they disagree."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from inference.conversion.gguf import convert_gguf
from inference.conversion.gguf_file import open_gguf, read_metadata
from tests.support.gguf_writer import write_gguf

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

if TYPE_CHECKING:
    import mlx.core as mx
    import mlx.nn as nn

VOCAB = 49152  # the demo GGUF's tokenizer: SmolLM2's
SMALL_VOCAB = 2048  # its first tokens and the merges that make them (small_vocabulary)
# Twenty token ids of ordinary text in SmolLM2's vocabulary; no tokenizer is involved.
PROMPT = [504, 2365, 6354, 16438, 27003, 690, 260, 23790, 2767, 30, 1780, 314, 253, 1230, 28,
          357, 5248, 1673, 1507, 30]  # fmt: skip
GREEDY = 16
# Of the logits' largest magnitude. The import only reorders float32 sums (about 1e-6).
LOGITS_TOLERANCE = 1e-4
# llama.cpp's flash attention rounds keys and values to float16 and its GELU reads a float16
# table: up to 2e-3 of the scale from float32. A misread architecture is 4e-2 (Gemma 3's rope
# scaling dropped) to 1 away.
LLAMA_CPP_TOLERANCE = 5e-3

COMMON = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "vocab_size": VOCAB,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 4096,
}


GPT_OSS = {
    "model_type": "gpt_oss",
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "rope_theta": 150000.0,
    "intermediate_size": 128,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "sliding_window": 8,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
    "layer_types": ["sliding_attention", "full_attention"],
    "rope_scaling": {
        "rope_type": "yarn",
        "factor": 32.0,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "original_max_position_embeddings": 4096,
    },
}


MINISTRAL3 = {
    "model_type": "ministral3",
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 128,
    "tie_word_embeddings": True,
    "rope_parameters": {
        "rope_type": "yarn",
        "rope_theta": 1000000.0,
        "factor": 16.0,
        "original_max_position_embeddings": 8,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "llama_4_scaling_beta": 0.1,
    },
}
# Llama 4 Scout style (text): four layers, so that the 4th is global and without rope; every
# second layer a mixture of 8 experts (top-1, sigmoid on the expert's input) beside a shared
# expert; q/k norms; Scout's llama3 rope scaling (no transition band). Chunks, the attention
# temperature's floor and scale are llama.cpp's hard-coded ones, past the test's positions.
LLAMA4_TEXT = {
    **COMMON,
    "model_type": "llama4_text",
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "intermediate_size": 128,
    "intermediate_size_mlp": 512,
    "num_local_experts": 8,
    "num_experts_per_tok": 1,
    "interleave_moe_layer_step": 2,
    "attention_bias": False,
    "attention_chunk_size": 8192,
    "attn_temperature_tuning": True,
    "floor_scale": 8192,
    "attn_scale": 0.1,
    "use_qk_norm": True,
    "rope_theta": 500000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 1.0, "original_max_position_embeddings": 64},
    "tie_word_embeddings": False,
}  # fmt: skip
LLAMA4 = {"model_type": "llama4", "tie_word_embeddings": False, "text_config": LLAMA4_TEXT}
GEMMA3 = {
    "model_type": "gemma3_text",
    "num_hidden_layers": 6,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "query_pre_attn_scalar": 64,
    "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0,
    "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    "sliding_window": 8,
    "sliding_window_pattern": 6,
    "rms_norm_eps": 1e-6,
}
# Gemma 4 E2B style: sliding layers (window 8, head 64) and global ones (head 128, a quarter
# rotated: proportional rope), the last two layers reusing layers 1's and 2's keys and values
# with double-wide MLPs, per-layer token inputs, a scalar per layer; norms w, not 1 + w.
GEMMA4 = {
    "model_type": "gemma4_text",
    "num_hidden_layers": 5,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "global_head_dim": 128,
    "layer_types": [
        *["sliding_attention", "sliding_attention", "full_attention"],
        *["sliding_attention", "full_attention"],
    ],
    "num_kv_shared_layers": 2,
    "use_double_wide_mlp": True,
    "hidden_size_per_layer_input": 32,
    "vocab_size_per_layer_input": VOCAB,
    "sliding_window": 8,
    "rope_parameters": {
        "full_attention": {
            "partial_rotary_factor": 0.25,
            "rope_theta": 1000000.0,
            "rope_type": "proportional",
        },
        "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
    },
    "final_logit_softcapping": 30.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}
# Gemma 4 31B style: no shared layers nor per-layer inputs; the global layers use their keys
# as values (no v_proj), with fewer key/value heads than the sliding ones.
GEMMA4_31B = GEMMA4 | {
    "num_hidden_layers": 4,
    "num_key_value_heads": 2,
    "num_global_key_value_heads": 1,
    "attention_k_eq_v": True,
    "layer_types": ["sliding_attention", "full_attention"] * 2,
    "num_kv_shared_layers": 0,
    "use_double_wide_mlp": False,
    "hidden_size_per_layer_input": 0,
}
# Gemma 4 26B-A4B style: beside each layer's MLP, 8 experts choosing 2 (written fused as
# llama.cpp's converter writes them: ffn_gate_up_exps), their router's and per-expert scales
# and the branches' own norms; sliding and global layers, keys as values on the global ones.
GEMMA4_MOE = GEMMA4_31B | {
    "num_hidden_layers": 3,
    "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
    "enable_moe_block": True,
    "num_experts": 8,
    "top_k_experts": 2,
    "moe_intermediate_size": 128,
}
# Gemma 3n E2B style, narrow: AltUp over 4 streams, Laurel, per-layer inputs, activation
# sparsity on the first 10 layers, 20 layers with keys of their own and 5 reusing layers 18's
# and 19's; mlx-lm nests it as text_config. llama.cpp fixes the layers with keys, Laurel's rank
# and the per-layer inputs' width (256: a 1.2 GB float32 table over SmolLM2's whole
# vocabulary), so its case runs on SmolLM2's first SMALL_VOCAB tokens (52 MB).
_GEMMA3N_LAYERS = 25
GEMMA3N = {
    "model_type": "gemma3n",
    "final_logit_softcapping": 30.0,  # for _random, which reads the top level
    "text_config": {
        "model_type": "gemma3n_text",
        "hidden_size": 128,
        "num_hidden_layers": _GEMMA3N_LAYERS,
        "intermediate_size": [256] * _GEMMA3N_LAYERS,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 64,
        "rms_norm_eps": 1e-6,
        "vocab_size": SMALL_VOCAB,
        "vocab_size_per_layer_input": SMALL_VOCAB,
        "num_kv_shared_layers": 5,
        "sliding_window": 8,
        "max_position_embeddings": 4096,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "final_logit_softcapping": 30.0,
        "layer_types": (["sliding_attention"] * 4 + ["full_attention"]) * 5,
        "activation_sparsity_pattern": [0.95] * 10 + [0.0] * (_GEMMA3N_LAYERS - 10),
        "hidden_size_per_layer_input": 256,
        "altup_num_inputs": 4,
        "altup_active_idx": 0,
        "altup_coef_clip": None,  # llama.cpp's: not clipped
        "altup_correct_scale": True,
        "laurel_rank": 64,
    },
}
NEMOTRON_H = {
    "model_type": "nemotron_h",
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "attention_bias": False,
    "mlp_bias": False,
    "use_bias": False,
    "hybrid_override_pattern": ["M", "-", "*", "M", "-"],
    "num_hidden_layers": 5,
    "mamba_num_heads": 8,
    "mamba_head_dim": 32,
    "mamba_proj_bias": False,
    "ssm_state_size": 16,
    "conv_kernel": 4,
    "n_groups": 2,
    "use_conv_bias": True,
    "layer_norm_epsilon": 1e-5,
    "tie_word_embeddings": False,
}


QWEN35 = {
    "model_type": "qwen3_5",
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "full_attention_interval": 2,
    "layer_types": ["linear_attention", "full_attention"],
    "linear_num_value_heads": 4,
    "linear_num_key_heads": 2,
    "linear_key_head_dim": 32,
    "linear_value_head_dim": 32,
    "linear_conv_kernel_dim": 4,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 10000000.0,
        "partial_rotary_factor": 0.25,
        "mrope_section": [3, 3, 2],
        "mrope_interleaved": True,
    },
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}
QWEN35_MOE = QWEN35 | {
    "model_type": "qwen3_5_moe",
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 128,
    "shared_expert_intermediate_size": 128,
    "norm_topk_prob": True,
    "tie_word_embeddings": False,
}


NEMOTRON_H_MOE = NEMOTRON_H | {
    "hybrid_override_pattern": ["M", "E", "*", "M", "E"],
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 128,
    "moe_shared_expert_intermediate_size": 256,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "routed_scaling_factor": 2.5,
    "n_group": 1,
    "topk_group": 1,
}


@dataclass(frozen=True)
class Case:
    """A checkpoint: the GGUF architecture llama.cpp's converter gives it, its config.json
    (which mlx-lm's ModelArgs reads too) and the seed of its random weights. Seeds are picked
    among the first few so that no greedy step is a near tie, which llama.cpp's float16
    attention could decide the other way (the smallest margin is 3x its noise or more), and
    that no expert choice is one either (a near tie there moves the logits by 1e-2 or
    more)."""

    id: str
    arch: str
    config: dict
    seed: int
    llama_cpp_tolerance: float = LLAMA_CPP_TOLERANCE
    weights: str = "float32"  # convert_gguf's: "quantized" keeps what MLX holds exactly
    vocabulary: int = VOCAB  # SMALL_VOCAB: SmolLM2's first tokens only
    # Where llama.cpp computes a step otherwise than the original (whose way the import
    # keeps): the logits compared with llama.cpp's are computed its way under this
    llama_cpp_arithmetic: Callable[[], AbstractContextManager] = contextlib.nullcontext

    @property
    def prompt(self) -> list[int]:
        return [token % self.vocabulary for token in PROMPT]

    def tokenizer(self, metadata: dict) -> dict:
        """The demo's tokenizer metadata, cut to the case's vocabulary."""
        return metadata if self.vocabulary == VOCAB else small_vocabulary(metadata, self.vocabulary)


CASES = [
    # SmolLM2 / Llama 2 style: tied embeddings, GQA, rope base 10000.
    Case("llama", "llama", {"model_type": "llama", "num_attention_heads": 4,
         "num_key_value_heads": 2, "rope_theta": 10000.0, "tie_word_embeddings": True}, 4),
    # Llama 3.2 style: llama3 rope scaling, whose band lies inside the prompt's positions.
    Case("llama3", "llama", {"model_type": "llama", "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 64, "rope_theta": 500000.0,
         "max_position_embeddings": 131072, "tie_word_embeddings": True,
         "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 128}},
         2),
    # Mistral 7B v0.2+ shape: 4:1 GQA, rope base 1e6, no sliding window, separate lm_head.
    Case("mistral", "llama", {"model_type": "mistral", "num_attention_heads": 4,
         "num_key_value_heads": 1, "head_dim": 64, "rope_theta": 1000000.0,
         "sliding_window": None, "tie_word_embeddings": False}, 0),
    # Ministral 3 style: YaRN and Llama 4's attention temperature, whose original context (8)
    # the prompt passes four times over; tied. llama.cpp's arch "mistral3".
    Case("mistral3", "mistral3", MINISTRAL3, 0),
    Case("llama4", "llama4", LLAMA4, 0),
    # Qwen2: q/k/v biases.
    Case("qwen2", "qwen2", {"model_type": "qwen2", "num_attention_heads": 4,
         "num_key_value_heads": 2, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
         "tie_word_embeddings": False}, 2),
    # Qwen3: q/k norms, and heads * head_dim (512) unlike hidden_size (256).
    Case("qwen3", "qwen3", {"model_type": "qwen3", "num_attention_heads": 8,
         "num_key_value_heads": 4, "head_dim": 64, "rope_theta": 1000000.0,
         "rms_norm_eps": 1e-6, "tie_word_embeddings": True}, 0),
    # Qwen3-30B-A3B style: q/k norms, every layer a mixture of 8 experts choosing 2, the
    # chosen weights renormalized; llama.cpp stacks the experts as mlx-lm's SwitchGLU does.
    Case("qwen3moe", "qwen3moe", {"model_type": "qwen3_moe", "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 64, "rope_theta": 1000000.0,
         "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "num_experts": 8,
         "num_experts_per_tok": 2, "moe_intermediate_size": 128, "decoder_sparse_step": 1,
         "mlp_only_layers": [], "norm_topk_prob": True}, 1),
    # gpt-oss-20b style (a bfloat16 copy: float experts): biases everywhere, attention sinks,
    # a sliding layer (window 8) then a global one, YaRN rope scaling.
    Case("gpt-oss", "gpt-oss", GPT_OSS, 2),
    # As OpenAI publishes it: the experts in MXFP4, which the converter copies block for block
    # and the import keeps in MLX's mxfp4 mode. llama.cpp rounds the activations those
    # experts multiply to 8 bits (Q8_0): about 8e-3 of the logits' scale.
    Case("gpt-oss-mxfp4", "gpt-oss", GPT_OSS | {"quantization_config": {"quant_method": "mxfp4"}},
         15, llama_cpp_tolerance=1.5e-2, weights="quantized"),
    # GLM-4.5 style: a dense first layer, then 8 experts with a shared one, sigmoid routing
    # with a bias on the choice, renormalized and scaled; q/k/v biases and norms, half the
    # head rotated; a multi-token prediction layer after the others, which is left out.
    Case("glm4moe", "glm4moe", {"model_type": "glm4_moe", "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 64, "partial_rotary_factor": 0.5,
         "rope_theta": 1000000.0, "rope_scaling": None, "attention_bias": True,
         "use_qk_norm": True, "n_routed_experts": 8, "num_experts_per_tok": 2,
         "n_shared_experts": 1, "moe_intermediate_size": 128, "first_k_dense_replace": 1,
         "routed_scaling_factor": 2.5, "norm_topk_prob": True, "n_group": 1, "topk_group": 1,
         "num_nextn_predict_layers": 1, "tie_word_embeddings": False}, 0),
    # DeepSeek-V3 style: latent attention with compressed queries, YaRN (with its attention
    # scale), a dense first layer, then 8 experts in 2 groups (1 kept) with a shared one.
    Case("deepseek2", "deepseek2", {"model_type": "deepseek_v3", "num_attention_heads": 4,
         "num_key_value_heads": 4, "q_lora_rank": 64, "kv_lora_rank": 64,
         "qk_rope_head_dim": 32, "qk_nope_head_dim": 64, "v_head_dim": 64,
         "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
         "n_shared_experts": 1, "moe_intermediate_size": 128, "first_k_dense_replace": 1,
         "routed_scaling_factor": 2.5, "norm_topk_prob": True, "scoring_func": "sigmoid",
         "topk_method": "noaux_tc", "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
         "max_position_embeddings": 163840, "tie_word_embeddings": False,
         "rope_scaling": {"type": "yarn", "factor": 40.0, "beta_fast": 32.0, "beta_slow": 1.0,
                          "mscale": 1.0, "mscale_all_dim": 1.0,
                          "original_max_position_embeddings": 4096}}, 0),
    # LFM2 style: a short-convolution layer, then an attention layer with q/k norms; its
    # feed-forward size adjusted (768 -> 512) before the converter writes it; tied.
    Case("lfm2", "lfm2", {"model_type": "lfm2", "num_attention_heads": 4,
         "num_key_value_heads": 2, "norm_eps": 1e-5, "conv_bias": False, "conv_L_cache": 3,
         "block_dim": 256, "block_ff_dim": 768, "block_multiple_of": 256,
         "block_ffn_dim_multiplier": 1.0, "block_auto_adjust_ff_dim": True,
         "layer_types": ["conv", "full_attention"], "rope_theta": 1000000.0,
         "tie_word_embeddings": True}, 0),
    # Granite 4.0-H-micro style: Mamba-2 layers (8 heads of 64, one group) and an attention
    # layer without rope, Granite's multipliers; dense feed-forward, tied.
    Case("granitehybrid", "granitehybrid", {"model_type": "granitemoehybrid",
         "num_attention_heads": 4, "num_key_value_heads": 2, "attention_bias": False,
         "embedding_multiplier": 12.0, "attention_multiplier": 0.015625,
         "residual_multiplier": 0.5, "logits_scaling": 2.0, "rope_theta": 10000.0,
         "position_embedding_type": "nope", "num_hidden_layers": 3,
         "layer_types": ["mamba", "attention", "mamba"], "num_local_experts": 0,
         "num_experts_per_tok": 0, "mamba_n_heads": 8, "mamba_d_head": 64, "mamba_expand": 2,
         "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_n_groups": 1,
         "mamba_conv_bias": True, "mamba_proj_bias": False, "tie_word_embeddings": True}, 0),
    # Granite 4.0-H-tiny style: the same with 8 experts choosing 2 and a shared expert, whose
    # gate and up llama.cpp keeps apart and mlx-lm holds as one projection.
    Case("granitehybrid-moe", "granitehybrid", {"model_type": "granitemoehybrid",
         "num_attention_heads": 4, "num_key_value_heads": 2, "attention_bias": False,
         "embedding_multiplier": 12.0, "attention_multiplier": 0.015625,
         "residual_multiplier": 0.5, "logits_scaling": 2.0, "rope_theta": 10000.0,
         "position_embedding_type": "nope", "num_hidden_layers": 3,
         "layer_types": ["mamba", "attention", "mamba"], "num_local_experts": 8,
         "num_experts_per_tok": 2, "shared_intermediate_size": 256, "intermediate_size": 128,
         "mamba_n_heads": 8, "mamba_d_head": 64, "mamba_expand": 2, "mamba_d_state": 16,
         "mamba_d_conv": 4, "mamba_n_groups": 1, "mamba_conv_bias": True,
         "mamba_proj_bias": False, "tie_word_embeddings": True}, 0),
    # Qwen3-Next style: a gated delta-net layer (2 key heads, 4 value heads), then a gated
    # attention layer rotating a quarter of each head; 8 experts and a gated shared one.
    Case("qwen3next", "qwen3next", {"model_type": "qwen3_next", "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 64, "partial_rotary_factor": 0.25,
         "full_attention_interval": 2, "linear_num_value_heads": 4, "linear_num_key_heads": 2,
         "linear_key_head_dim": 32, "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4,
         "num_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 1,
         "moe_intermediate_size": 128, "shared_expert_intermediate_size": 128,
         "mlp_only_layers": [], "norm_topk_prob": True, "rope_theta": 1000000.0,
         "rms_norm_eps": 1e-6, "tie_word_embeddings": False}, 0),
    # Qwen3.5 style (dense, tied): a gated delta-net layer with its projections apart and
    # twice as many value heads (4) as key heads (2), which llama.cpp's converter reorders,
    # then a gated attention layer with interleaved multimodal rope (text: plain rope).
    Case("qwen35", "qwen35", QWEN35, 0),
    # Qwen3.5-35B-A3B style: the same layers, each with 8 experts choosing 2 and a gated
    # shared expert.
    Case("qwen35moe", "qwen35moe", QWEN35_MOE, 0),
    # Nemotron-H / Nemotron Nano 2 style: Mamba-2 layers (8 heads of 32 in 2 groups, each
    # normalized on its own), squared-ReLU MLP layers and an attention layer without rope,
    # one norm a layer; mlx-lm's "backbone" names.
    Case("nemotron_h", "nemotron_h", NEMOTRON_H, 0),
    # Nemotron 3 Nano style: Mamba-2, mixtures of 8 squared-ReLU experts choosing 2 (sigmoid,
    # a bias on the choice, renormalized and scaled) beside a shared expert, and attention.
    Case("nemotron_h_moe", "nemotron_h_moe", NEMOTRON_H_MOE, 0),
    # Gemma 2: four norms a layer, attention and final soft-capping. Its sliding window
    # (4096, as the real ones) is longer than the test: mlx-lm has none.
    Case("gemma2", "gemma2", {"model_type": "gemma2", "num_attention_heads": 8,
         "num_key_value_heads": 4, "head_dim": 64, "query_pre_attn_scalar": 64,
         "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "attn_logit_softcapping": 50.0,
         "final_logit_softcapping": 30.0, "sliding_window": 4096}, 4),
    # Gemma 3: q/k norms, five sliding layers (window 8, local rope base) then a global one
    # with the linear rope scaling of the 4B and larger models.
    Case("gemma3", "gemma3", GEMMA3, 0),
    # Gemma 3 whose file lists each layer's kind (sliding, global, ...), as llama.cpp reads it
    # when a file has it: imported as every second layer global.
    Case("gemma3-pattern-list", "gemma3", GEMMA3 | {"num_hidden_layers": 4,
         "sliding_window_pattern": 2, "layer_types": ["sliding_attention", "full_attention"] * 2},
         0),
    Case("gemma4", "gemma4", GEMMA4, 0),
    Case("gemma4-31b", "gemma4", GEMMA4_31B, 0),
    Case("gemma4-moe", "gemma4", GEMMA4_MOE, 0),
    # Deep (25 layers) with activation sparsity's cut-offs: llama.cpp's float16 keys and values
    # move the logits by up to 1e-2 of their scale. Seed 8: its smallest greedy margin (0.29)
    # stays above that noise (0.27); seed 0's (0.20) did not, and llama.cpp built for an
    # AVX-512 CPU took another token at a margin of 0.40.
    Case("gemma3n", "gemma3n", GEMMA3N, 8, vocabulary=SMALL_VOCAB, llama_cpp_tolerance=1.5e-2,
         llama_cpp_arithmetic=lambda: _sample_std_sparsity()),
    # Phi-4-mini style: fused qkv and gate_up, partial rotary (48 of 64 dimensions), GQA, tied,
    # longrope. The original context is below llama.cpp's, so it picks the long factors, as
    # mlx-lm always does.
    Case("phi3", "phi3", {"model_type": "phi3", "num_attention_heads": 4,
         "num_key_value_heads": 2, "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
         "max_position_embeddings": 256, "original_max_position_embeddings": 32,
         "sliding_window": 262144, "tie_word_embeddings": True,
         "rope_scaling": {"type": "longrope", "long_factor": np.linspace(1, 4, 24).tolist(),
                          "short_factor": np.linspace(1, 1.5, 24).tolist()}}, 5),
]  # fmt: skip


@dataclass
class Outcome:
    original_logits: np.ndarray  # (prompt, vocab)
    imported_logits: np.ndarray
    imported_logits_llama_cpp_way: np.ndarray  # Case.llama_cpp_arithmetic's
    greedy: list[int]
    margins: list[float]  # top-1 minus top-2 logit at each greedy step
    llama_cpp: dict  # llama-reference's JSON: argmax, last_logits, greedy
    llama_cpp_tolerance: float
    tokenizer_error: str  # what loading the import's tokenizer as the server does raised


@pytest.fixture(scope="module")
def tokenizer_metadata(demo_gguf: Path) -> dict:
    metadata = read_metadata(demo_gguf)
    return {key: value for key, value in metadata.items() if key.startswith("tokenizer.ggml.")}


def small_vocabulary(metadata: dict, size: int) -> dict:
    """SmolLM2's tokenizer cut to its first `size` tokens: its merges are in the order of the
    tokens they make, so the first ones make exactly those."""
    tokens = metadata["tokenizer.ggml.tokens"][:size]
    known = set(tokens)
    merges = metadata["tokenizer.ggml.merges"]
    kept = next(n for n, merge in enumerate(merges) if merge.replace(" ", "") not in known)
    return metadata | {
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": metadata["tokenizer.ggml.token_type"][:size],
        "tokenizer.ggml.merges": merges[:kept],
    }


@pytest.fixture(scope="module", params=CASES, ids=[case.id for case in CASES])
def outcome(request, tokenizer_metadata, llama_tools, tmp_path_factory) -> Iterator[Outcome]:
    from mlx_lm.utils import load_model

    case: Case = request.param
    config = {**COMMON, **case.config}
    folder = tmp_path_factory.mktemp(case.id)
    original = build_model(config, case.seed)
    weights = {name: np.array(value) for name, value in _parameters(original).items()}
    tokenizer = case.tokenizer(tokenizer_metadata)
    source = write_gguf(folder / "model.gguf", case.arch, config, weights, tokenizer)
    converted = convert_gguf(source, folder / "imported", weights=case.weights).path
    imported, _ = load_model(converted)
    greedy, margins = greedy_decode(imported, case.prompt, GREEDY)
    yield Outcome(
        original_logits=prompt_logits(original, case.prompt),
        imported_logits=prompt_logits(imported, case.prompt),
        imported_logits_llama_cpp_way=_llama_cpp_way(case, imported),
        greedy=greedy,
        margins=margins,
        llama_cpp=llama_reference(llama_tools, source, case.prompt, GREEDY),
        llama_cpp_tolerance=case.llama_cpp_tolerance,
        tokenizer_error=_tokenizer_error(converted),
    )
    shutil.rmtree(folder)  # a few hundred MB of float32 per case


def test_the_tokenizer_loads(outcome: Outcome):
    # transformers validates the model's config.json on the way (a None or a float where its
    # config class wants a number or an integer is an error there)
    assert not outcome.tokenizer_error


def _tokenizer_error(folder: Path) -> str:
    from mlx_lm.utils import load_tokenizer

    try:
        load_tokenizer(folder)
    except Exception as error:  # the test reports whatever it is
        return f"{type(error).__name__}: {error}"
    return ""


def _llama_cpp_way(case: Case, model: nn.Module) -> np.ndarray:
    with case.llama_cpp_arithmetic():
        return prompt_logits(model, case.prompt)


@contextlib.contextmanager
def _sample_std_sparsity() -> Iterator[None]:
    """Gemma 3n's activation sparsity cuts at mean + k std of each row: llama.cpp's std is the
    sample's (n - 1), the original's (Hugging Face's, mlx-lm's) the population's. Negligible
    8k wide; at this model's 256, 5e-2 of the logits' scale."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx_lm.models import gemma3n

    def gelu_topk(inputs: mx.array, std_multiplier: mx.array) -> mx.array:
        width = inputs.shape[-1]
        mean = mx.mean(inputs, axis=-1, keepdims=True)
        std = mx.std(inputs, axis=-1, keepdims=True) * (width / (width - 1)) ** 0.5
        return nn.gelu_approx(mx.maximum(0, inputs - (mean + std * std_multiplier)))

    original, gemma3n.gelu_topk = gemma3n.gelu_topk, gelu_topk
    try:
        yield
    finally:
        gemma3n.gelu_topk = original


def test_logits_match_the_original(outcome: Outcome):
    scale = np.abs(outcome.original_logits).max()
    difference = np.abs(outcome.imported_logits - outcome.original_logits).max()
    assert difference <= LOGITS_TOLERANCE * scale, f"max diff {difference:.3g}, scale {scale:.3g}"


def test_greedy_matches_llama_cpp(outcome: Outcome):
    assert outcome.greedy == outcome.llama_cpp["greedy"], f"our margins {outcome.margins}"


def test_last_logits_close_to_llama_cpp(outcome: Outcome):
    reference = np.array(outcome.llama_cpp["last_logits"], dtype=np.float32)
    scale = np.abs(reference).max()
    difference = np.abs(outcome.imported_logits_llama_cpp_way[-1] - reference).max()
    message = f"max diff {difference:.3g}, scale {scale:.3g}"
    assert difference <= outcome.llama_cpp_tolerance * scale, message


# Building and running the models, and asking llama.cpp.


def build_model(config: dict, seed: int) -> nn.Module:
    """mlx-lm's model for the config, with random float32 weights, norms included (their
    default of ones would hide a norm loaded into the wrong place)."""
    import importlib

    import mlx.core as mx
    from mlx.utils import tree_unflatten
    from mlx_lm.utils import MODEL_REMAPPING

    module = config["model_type"]
    module = importlib.import_module(f"mlx_lm.models.{MODEL_REMAPPING.get(module, module)}")
    model = module.Model(module.ModelArgs.from_dict(config))
    if config["model_type"] == "gemma3_text":
        model.sanitize({})  # no lm_head.weight: Gemma 3 ties its embeddings
    rng = np.random.default_rng(seed)
    values = {
        name: mx.array(_random(name, param.shape, rng, config))
        for name, param in _parameters(model).items()
    }
    if (config.get("quantization_config") or {}).get("quant_method") == "mxfp4":
        values = {name: _mxfp4_values(name, value) for name, value in values.items()}
    model.update(tree_unflatten(list(values.items())))
    mx.eval(model.parameters())
    return model


FINAL_NORMS = (
    "model.norm.weight",
    "model.embedding_norm.weight",
    "backbone.norm_f.weight",
    "language_model.model.norm.weight",  # Qwen3.5's
    "model.language_model.norm.weight",  # Gemma 3n's
)


def _random(
    name: str, shape: tuple[int, ...], rng: np.random.Generator, config: dict
) -> np.ndarray:
    """Logits of a few tens, decided by the context. With tied embeddings the token's own
    embedding, if large, would make every token predict itself: there they are small and the
    final norm scales the logits up instead."""
    tied = config.get("tie_word_embeddings", True)
    embedding, final_norm = (1 / 64, 64.0) if tied else (1.0, 1.0)
    if config.get("final_logit_softcapping"):
        final_norm /= 2  # logits about the cap, where tanh still tells them apart
    if name.endswith(("norm.weight", "norm_f.weight")):  # Nemotron-H's final norm_f
        scale = final_norm if name in FINAL_NORMS else 1.0
        values = scale * (1 + 0.2 * rng.standard_normal(shape, dtype=np.float32))
        if config["model_type"] in ("gemma4_text", "gemma3n"):  # their norms scale by w
            # They attend with scale 1: their q and k norms carry the 1/sqrt(head_dim),
            # without which attention is one-hot and llama.cpp's float16 keys and values tip it.
            qk = name.endswith(("q_norm.weight", "k_norm.weight"))
            return values * shape[-1] ** -0.25 if qk else values
        # Gemma's norms hold w and scale by 1 + w
        return values - 1 if config["model_type"].startswith("gemma") else values
    if name.endswith((".layer_scalar", ".per_expert_scale")):  # Gemma 4's output scales
        return 1 + 0.2 * rng.standard_normal(shape, dtype=np.float32)
    if name.endswith(".router.scale"):  # Gemma 4's router input, / sqrt(hidden) in mlx-lm
        # about sqrt(hidden): router logits of a few units, not near-ties
        return shape[-1] ** 0.5 * (1 + 0.2 * rng.standard_normal(shape, dtype=np.float32))
    values = rng.standard_normal(shape, dtype=np.float32)
    if name.endswith(".bias"):
        return 0.5 * values
    if "embed_tokens" in name or "lm_head" in name:
        return embedding * values
    return values / np.sqrt(shape[-1])


def _mxfp4_values(name: str, values: mx.array) -> mx.array:
    import mlx.core as mx

    if ".mlp.experts." not in name or not name.endswith(".weight"):
        return values
    packed, scales = mx.quantize(values, group_size=32, bits=4, mode="mxfp4")
    restored = mx.dequantize(packed, scales, group_size=32, bits=4, mode="mxfp4")
    return restored.astype(values.dtype)


def _parameters(model: nn.Module) -> dict[str, mx.array]:
    from mlx.utils import tree_flatten

    return dict(tree_flatten(model.parameters()))


def prompt_logits(model: nn.Module, prompt: list[int]) -> np.ndarray:
    """With mlx-lm's caches, as the server runs it: without them mlx-lm's Gemma 3n computes
    its shared layers' keys and values from their own (unused) projections."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    return np.array(model(mx.array([prompt]), cache=cache)[0].astype(mx.float32))


def greedy_decode(model: nn.Module, prompt: list[int], count: int) -> tuple[list[int], list[float]]:
    """Plain argmax over mlx-lm's forward pass with its own caches, no sampler."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    logits = model(mx.array([prompt]), cache=cache)[0, -1]
    tokens, margins = [], []
    for _ in range(count):
        top = np.sort(np.array(logits.astype(mx.float32)))[-2:]
        margins.append(round(float(top[1] - top[0]), 4))
        tokens.append(int(mx.argmax(logits)))
        logits = model(mx.array([[tokens[-1]]]), cache=cache)[0, -1]
    return tokens, margins


def llama_reference(tools: Path, model: Path, prompt: list[int], count: int) -> dict:
    command = [str(tools / "llama-reference"), str(model), str(count), *map(str, prompt)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


# Quantized mixtures of experts and hybrids, as people download them: llama-quantize's types for the
# stacked experts (3-D, kept exactly) and the rest. llama.cpp computes them with activations
# rounded to 8 bits, about 2e-2 of the logits' scale, which can tip an expert choice that the
# float model makes narrowly (then a token moves by several logits): the seeds are ones
# without such a choice in the first tokens, which are all that is compared.
QUANTIZED = [
    ("qwen3moe", "Q4_K_M", 1),
    ("glm4moe", "Q8_0", 0),
    ("deepseek2", "Q8_0", 3),
    ("granitehybrid-moe", "Q8_0", 0),
    # attn_qkv in Q8_0 beside attn_gate in Q4_K, which become one 8-bit in_proj_qkvz
    ("qwen3next", "Q4_K_M", 1),
    # out_proj's value-head columns moved back in whole groups of the quantized tensor
    ("qwen35moe", "Q4_K_M", 1),
    # no experts: Mamba-2's projections and the MLP's quantized
    # Q and K rows moved back one by one, quantized
    ("mistral3", "Q4_K_M", 1),
    ("nemotron_h", "Q4_K_M", 0),
    # squared-ReLU experts scaled by 2.5: llama.cpp's 8-bit activations tip Q4_K_M's choices
    # on most seeds (on the file dequantized to F32, llama.cpp agrees with the import 8/8)
    ("nemotron_h_moe", "Q8_0", 1),
    # top-1 experts (Q4_K, Q5_0 or Q8_0 where rows are 128 wide) and the router in float
    ("llama4", "Q4_K_M", 1),
    # the per-layer token table and projections quantized too; the shared layers' unused
    # keys and values imported (quantized) and dropped by mlx-lm
    ("gemma4", "Q4_K_M", 0),
    # the fused gate_up experts (Q4_K) split in two by rows, quantized; seeds 0, 1 and 3 tip
    # an expert choice in llama.cpp (their imports' weights are the file's, to 2e-4)
    ("gemma4-moe", "Q4_K_M", 2),
    # activation sparsity's cut-offs make it the most sensitive to llama.cpp's 8-bit
    # activations: seed 3 agrees 8/8 in Q8_0, seeds 0-2 from 0 to 3 tokens, Q4_K_M 0-3 (on
    # the Q8_0 file dequantized to F32, llama.cpp agrees with the import to 3e-3 of the scale)
    ("gemma3n", "Q8_0", 3),
]
QUANTIZED_GREEDY = 8


@pytest.mark.parametrize(("case_id", "kind", "seed"), QUANTIZED, ids=[q[0] for q in QUANTIZED])
def test_quantized_experts_match_llama_cpp(
    case_id: str, kind: str, seed: int, tokenizer_metadata, llama_tools, tmp_path
):
    from inference.engine import q6k

    case = next(case for case in CASES if case.id == case_id)
    config = {**COMMON, **case.config}
    model = build_model(config, seed)
    weights = {name: np.array(value) for name, value in _parameters(model).items()}
    tokenizer = case.tokenizer(tokenizer_metadata)
    source = write_gguf(tmp_path / "f32.gguf", case.arch, config, weights, tokenizer)
    quantized = tmp_path / f"{kind}.gguf"
    command = [str(llama_tools / "llama-quantize"), str(source), str(quantized), kind, "2"]
    subprocess.run(command, check=True, capture_output=True)
    converted = convert_gguf(quantized, tmp_path / "imported")
    types = converted.report["types"]
    tensors = open_gguf(quantized).tensors
    experts = {t.type_name for t in tensors if len(t.shape) == 3 and "_exps." in t.name}
    assert not experts & {"F32", "F16"}, experts  # the experts, if any, are quantized
    assert {t.type_name for t in tensors if len(t.shape) == 2} - {"F32", "F16"}
    imported, _, _ = q6k.load_model(converted.path)  # its Q6_K layers as MLX 8-bit
    greedy, margins = greedy_decode(imported, case.prompt, QUANTIZED_GREEDY)
    reference = llama_reference(llama_tools, quantized, case.prompt, QUANTIZED_GREEDY)
    assert greedy == reference["greedy"], f"our margins {margins}, types {types}"


# What mlx-lm computes differently from llama.cpp is refused, not imported wrong.
REFUSED = [
    ("deepseek2", {"scoring_func": "softmax"}, "only sigmoid expert routing"),
    ("granitehybrid", {"position_embedding_type": "rope"}, "with rope"),
    ("granitehybrid", {"mamba_n_groups": 2}, "more than one Mamba group"),
    (
        "gemma3-pattern-list",
        {"layer_types": ["sliding_attention"] + ["full_attention"] * 3},
        "other than every n-th layer global",
    ),
    # MobileLLM-R1 style: llama.cpp then ropes all layers but the last, without chunks
    (
        "llama4",
        {"text_config": LLAMA4_TEXT | {"layer_types": ["full_attention"] * 4}},
        "without chunked attention",
    ),
    # mlx-lm's llama4 takes its global layers' mask from the 4th layer's cache
    ("llama4", {"text_config": LLAMA4_TEXT | {"num_hidden_layers": 3}}, "fewer than 4 layers"),
    # llama.cpp's shared sliding layer reads layer n-2 (global here), mlx-lm's the last sliding
    (
        "gemma4",
        {
            "layer_types": [
                *["sliding_attention", "full_attention", "sliding_attention"],
                *["sliding_attention", "full_attention"],
            ]
        },
        "shared layers would reuse another layer's keys",
    ),
    # the global layers' own key/value head count, which mlx-lm reads only with keys as values
    ("gemma4-31b", {"attention_k_eq_v": False}, "only supported where those use keys as values"),
    # llama.cpp rotates part of a sliding head by its rope dimension count; mlx-lm all of it
    (
        "gemma4",
        {"rope_parameters": GEMMA4["rope_parameters"] | {"partial_rotary_factor": 0.5}},
        "sliding layers rotate part of the head",
    ),
]


@pytest.mark.parametrize(("case_id", "change", "message"), REFUSED, ids=[r[2] for r in REFUSED])
def test_refuses_what_mlx_lm_computes_otherwise(
    case_id: str, change: dict, message: str, tokenizer_metadata, tmp_path
):
    from inference.conversion.gguf import UnsupportedGGUF

    case = next(case for case in CASES if case.id == case_id)
    config = {**COMMON, **case.config, **change}
    weights = {name: np.array(value) for name, value in _parameters(build_model(config, 0)).items()}
    source = write_gguf(tmp_path / "model.gguf", case.arch, config, weights, tokenizer_metadata)
    with pytest.raises(UnsupportedGGUF, match=message):
        convert_gguf(source, tmp_path / "imported")
    assert not (tmp_path / "imported").exists()


# Gemma 3n, small: llama.cpp computes it only with the sizes it fixes (GEMMA3N's), which the
# import checks.
GEMMA3N_SMALL = {"hidden_size_per_layer_input": 8}
GEMMA3N_REFUSED = [
    ({}, "hidden_size_per_layer_input 8"),
    ({"laurel_rank": 16}, "laurel_rank 16"),
    ({"num_kv_shared_layers": 6}, "other than 20 layers of their own keys"),
    ({"activation_sparsity_pattern": [0.95] * 5 + [0.0] * 20}, "activation sparsity"),
]


@pytest.mark.parametrize(
    ("change", "message"), GEMMA3N_REFUSED, ids=[r[1] for r in GEMMA3N_REFUSED]
)
def test_gemma3n_refuses_what_llama_cpp_fixes(
    change: dict, message: str, tokenizer_metadata, tmp_path
):
    from inference.conversion.gguf import UnsupportedGGUF

    text = GEMMA3N["text_config"] | GEMMA3N_SMALL | change
    config = {**COMMON, **GEMMA3N, "text_config": text}
    weights = {name: np.array(value) for name, value in _parameters(build_model(config, 0)).items()}
    source = write_gguf(tmp_path / "model.gguf", "gemma3n", config, weights, tokenizer_metadata)
    with pytest.raises(UnsupportedGGUF, match=message):
        convert_gguf(source, tmp_path / "imported")
    assert not (tmp_path / "imported").exists()


class _MadeWhenAsked(Mapping):
    """A checkpoint whose tensors are made when the writer asks (bench/real_width_peers.py's
    random weights, larger than memory); counts how many it made."""

    def __init__(self, weights: dict[str, np.ndarray]) -> None:
        self.weights, self.made = weights, 0

    def __getitem__(self, name: str) -> np.ndarray:
        self.made += 1
        return self.weights[name].copy()

    def __iter__(self):
        return iter(self.weights)

    def __len__(self) -> int:
        return len(self.weights)


def test_a_streamed_write_holds_the_same_tensors_with_matrices_in_float16(
    tokenizer_metadata, tmp_path
):
    """The benchmark writes a 30B-A3B-width checkpoint tensor by tensor (`streamed`): each
    tensor made once when the writer reaches it, under the plain write's names and shapes,
    matrices in float16 (llama-quantize reads them as the converter's f16 output) but for
    what the converter keeps float32 (the router), vectors in float32."""
    from gguf import GGMLQuantizationType, GGUFReader

    case = next(c for c in CASES if c.id == "qwen3moe")
    config = {**COMMON, **case.config}
    weights = {name: np.array(value) for name, value in _parameters(build_model(config, 0)).items()}
    tokenizer = small_vocabulary(tokenizer_metadata, 512)
    plain = write_gguf(tmp_path / "plain.gguf", case.arch, config, weights, tokenizer)
    lazy = _MadeWhenAsked(weights)
    streamed = write_gguf(tmp_path / "streamed.gguf", case.arch, config, lazy, tokenizer, True)
    assert lazy.made == len(weights)
    expected = {t.name: t for t in GGUFReader(plain).tensors}
    written = {t.name: t for t in GGUFReader(streamed).tensors}
    assert written.keys() == expected.keys()
    for name, tensor in expected.items():
        ours = written[name]
        assert list(ours.shape) == list(tensor.shape), name
        half = len(tensor.shape) > 1 and ".ffn_gate_inp." not in name
        assert ours.tensor_type == (GGMLQuantizationType.F16 if half else tensor.tensor_type)
        values = np.asarray(tensor.data).astype(np.float16 if half else np.float32)
        assert np.array_equal(np.asarray(ours.data), values), name
