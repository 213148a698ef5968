"""Tiny random-weight chat models of the 2026 architectures, built with mlx-lm's own model
classes, for the architecture matrix: every layer kind a family has (linear and full attention,
sliding and global, dense and MoE, shared-KV, MLA) appears at least once in a model that builds
in about a second and loads with `mlx_lm.load`.

Shapes are chosen for the engine's fast paths: attention head_dim 64 wherever a family has a
head_dim (so 8-bit KV caches with group 64 apply), MLA latents (kv_lora_rank) and rope heads
(qk_rope_head_dim) 64 wide, expert and MLP widths multiples of 64 (so mlx-lm's 4-bit group-64
quantization reaches them), sliding windows of 16 tokens (so a ~100-token prompt crosses
them); llama4's attention chunk (CHUNK) is longer than any prompt of the matrix."""

from __future__ import annotations

import contextlib
import copy
import importlib
import io
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from tests.support.helpers import TINY_CONFIG

WINDOW = 16  # sliding window: a 100-token prompt wraps the rotating caches several times
# llama4's attention_chunk_size: past the matrix's prompts and answers, since the engine serves
# Llama 4 within its first chunk (engine/chunked.py).
CHUNK = 512

# Every family shares these: small, but head_dim 64 so that KV quantization with group 64 applies.
HEAD_DIM = 64
BASE = {
    **{k: TINY_CONFIG[k] for k in ("bos_token_id", "eos_token_id", "rope_theta")},
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": HEAD_DIM,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}
# Routed experts: four of width 64, two per token.
MOE = {"num_experts_per_tok": 2, "moe_intermediate_size": 64}
# Multi-head latent attention (DeepSeek V3, GLM-4.7-Flash): the cache holds the 64-wide latent
# as "keys" and the 64-wide shared rope key as "values".
MLA = {
    "kv_lora_rank": 64,
    "q_lora_rank": 64,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 64,
    "v_head_dim": 64,
}
# DeepSeek-style routing (also Nemotron 3's): one group, sigmoid scores with a correction bias,
# a shared expert.
DEEPSEEK_ROUTING = {
    **MOE,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "n_group": 1,
    "topk_group": 1,
    "routed_scaling_factor": 2.5,
    "norm_topk_prob": True,
}
# ... and a dense first layer before the MoE one.
DEEPSEEK_MOE = {**DEEPSEEK_ROUTING, "first_k_dense_replace": 1, "num_hidden_layers": 2}


@dataclass(frozen=True)
class Arch:
    name: str
    kind: str  # the most telling of kinds: "dense"|"moe"|"hybrid"|"mla"|"sliding"|"chunked"
    kinds: tuple[str, ...]  # all that apply; "shared_kv" too where later layers reuse KV
    config: dict


def _arch(name: str, kinds: tuple[str, ...], **config: object) -> Arch:
    return Arch(name, kinds[0], kinds, {**BASE, **config})


def _text(name: str, kinds: tuple[str, ...], wrapper: str, **text_config: object) -> Arch:
    """A checkpoint whose text model sits in text_config (multimodal wrappers mlx-lm loads
    text-only), as its real config.json has it."""
    return Arch(
        name, kinds[0], kinds, {"model_type": wrapper, "text_config": {**BASE, **text_config}}
    )


_ARCHS = [
    _arch(
        "llama3",
        ("dense",),
        model_type="llama",
        num_hidden_layers=2,
        max_position_embeddings=131072,  # transformers warns unless above the original 8192
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    ),
    _arch("qwen3", ("dense",), model_type="qwen3", num_hidden_layers=2),
    # Ministral 3 ships as Mistral3ForConditionalGeneration: a mistral3 wrapper around a
    # ministral3 text model, with YaRN plus llama4-style attention temperature scaling.
    # Untied like the 8B/14B: tied, this random model's greedy decoding repeats one token.
    _text(
        "ministral3",
        ("dense",),
        "mistral3",
        model_type="ministral3",
        num_hidden_layers=2,
        max_position_embeddings=262144,  # factor x original, or transformers warns
        rope_parameters={
            "rope_type": "yarn",
            "type": "yarn",
            "rope_theta": 1000000.0,
            "factor": 16.0,
            "original_max_position_embeddings": 16384,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "llama_4_scaling_beta": 0.1,
        },
    ),
    _arch(
        "qwen3_moe",
        ("moe",),
        model_type="qwen3_moe",
        num_hidden_layers=2,
        **MOE,
        num_experts=4,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        norm_topk_prob=True,
    ),
    # Attention sinks, biased projections, and alternating sliding/full layers.
    _arch(
        "gpt_oss",
        ("moe", "sliding"),
        model_type="gpt_oss",
        num_hidden_layers=2,
        layer_types=["sliding_attention", "full_attention"],
        sliding_window=WINDOW,
        num_local_experts=4,
        num_experts_per_tok=2,
        intermediate_size=64,
    ),
    _arch(
        "glm4_moe",
        ("moe",),
        model_type="glm4_moe",
        **DEEPSEEK_MOE,
        rope_scaling=None,
        use_qk_norm=True,
        attention_bias=True,
        partial_rotary_factor=0.5,
    ),
    # GLM-4.7-Flash: MLA attention, DeepSeek routing.
    _arch(
        "glm4_moe_lite",
        ("mla", "moe"),
        model_type="glm4_moe_lite",
        **DEEPSEEK_MOE,
        **MLA,
        num_key_value_heads=4,
        num_nextn_predict_layers=0,
    ),
    _arch(
        "deepseek_v3",
        ("mla", "moe"),
        model_type="deepseek_v3",
        **DEEPSEEK_MOE,
        # A rope part 32 wide, as some MLA checkpoints have: the KV cache groups it by 32.
        **{**MLA, "qk_rope_head_dim": 32},
        num_key_value_heads=4,
        max_position_embeddings=163840,
        rope_scaling={
            "type": "yarn",
            "factor": 40.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
    ),
    # MiniMax M2: every layer MoE, partial rotary (32 of 64), per-layer QK norm.
    _arch(
        "minimax",
        ("moe",),
        model_type="minimax",
        num_hidden_layers=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        intermediate_size=64,
        shared_intermediate_size=0,
        rotary_dim=32,
        use_qk_norm=True,
    ),
    # Llama 4 (Scout/Maverick) text: layers 0-2 of each four attend within chunks (with rope),
    # layer 3 globally (without); MoE every second layer, one routed expert plus a shared one.
    _text(
        "llama4",
        ("chunked", "moe"),
        "llama4",
        model_type="llama4_text",
        num_hidden_layers=4,
        attention_chunk_size=CHUNK,
        interleave_moe_layer_step=2,
        num_local_experts=4,
        num_experts_per_tok=1,
        intermediate_size=64,
        intermediate_size_mlp=128,
        use_qk_norm=True,
        attention_bias=False,
        max_position_embeddings=262144,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    ),
    # Gated DeltaNet layers then a full attention layer (interval 2), all MoE.
    _arch(
        "qwen3_next",
        ("hybrid", "moe"),
        model_type="qwen3_next",
        num_hidden_layers=2,
        full_attention_interval=2,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=64,
        linear_value_head_dim=64,
        linear_conv_kernel_dim=4,
        **MOE,
        num_experts=4,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        shared_expert_intermediate_size=64,
        partial_rotary_factor=0.25,
        norm_topk_prob=True,
    ),
]


def _qwen3_5(name: str, moe: bool) -> Arch:
    """Qwen3.5 (dense) and Qwen3.5-MoE: the Qwen3-Next layer stack inside a multimodal
    wrapper, with multimodal rope (its sections sum to the rotated half-width: 16 / 2)."""
    experts = {**MOE, "num_experts": 4, "shared_expert_intermediate_size": 64} if moe else {}
    return _text(
        name,
        ("hybrid", "moe") if moe else ("hybrid",),
        name,
        model_type=f"{name}_text",
        num_hidden_layers=2,
        full_attention_interval=2,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=64,
        linear_value_head_dim=64,
        linear_conv_kernel_dim=4,
        rope_parameters={
            "rope_type": "default",
            "mrope_section": [2, 3, 3],
            "mrope_interleaved": True,
            "rope_theta": 10000000.0,
            "partial_rotary_factor": 0.25,
        },
        **experts,
    )


_ARCHS += [
    _qwen3_5("qwen3_5", moe=False),
    _qwen3_5("qwen3_5_moe", moe=True),
    # Granite 4.0 H: Mamba2 and attention (NoPE) layers, each with a MoE and a shared MLP.
    # No head_dim setting: hidden 128 over 2 heads gives 64.
    _arch(
        "granitemoehybrid",
        ("hybrid", "moe"),
        model_type="granitemoehybrid",
        hidden_size=128,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=None,
        num_hidden_layers=2,
        layer_types=["mamba", "attention"],
        position_embedding_type="nope",
        attention_bias=False,
        # Granite 4 has 12, 0.22 and 6-8: here a random token embedding x12 outweighs the
        # layers' x0.22 and greedy decoding repeats one token. Smaller, but not 1 (still used).
        embedding_multiplier=2.0,
        attention_multiplier=0.0078125,
        logits_scaling=2.0,
        residual_multiplier=0.5,
        num_local_experts=4,
        num_experts_per_tok=2,
        intermediate_size=64,
        shared_intermediate_size=128,
        mamba_n_heads=4,
        mamba_d_head=64,
        mamba_d_state=16,
        mamba_d_conv=4,
        mamba_n_groups=1,
        mamba_proj_bias=False,
        mamba_conv_bias=True,
        tie_word_embeddings=True,
    ),
    # Nemotron 3 (Nano): Mamba2 "M", attention "*", MoE "E" and MLP "-" blocks; only M and *
    # have caches.
    _arch(
        "nemotron_h",
        ("hybrid", "moe"),
        model_type="nemotron_h",
        hybrid_override_pattern=["M", "E", "*", "-"],
        attention_bias=False,
        mamba_num_heads=4,
        mamba_head_dim=32,
        mamba_proj_bias=False,
        ssm_state_size=16,
        conv_kernel=4,
        n_groups=1,
        mlp_bias=False,
        layer_norm_epsilon=1e-5,
        use_bias=False,
        use_conv_bias=True,
        **DEEPSEEK_ROUTING,
        moe_shared_expert_intermediate_size=64,
    ),
    # LFM2: short gated convolutions then attention. No head_dim setting: 128 / 2 heads.
    _arch(
        "lfm2",
        ("hybrid",),
        model_type="lfm2",
        hidden_size=128,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=None,
        num_hidden_layers=2,
        layer_types=["conv", "full_attention"],
        norm_eps=1e-5,
        conv_bias=False,
        conv_L_cache=3,
        block_dim=128,
        block_ff_dim=256,
        block_multiple_of=64,
        block_ffn_dim_multiplier=1.0,
        block_auto_adjust_ff_dim=False,
        tie_word_embeddings=True,
    ),
    # Kimi Linear: a Kimi Delta Attention layer then an MLA layer without rope (NoPE); the
    # first layer dense, the second MoE.
    _arch(
        "kimi_linear",
        ("hybrid", "mla", "moe"),
        model_type="kimi_linear",
        num_hidden_layers=2,
        num_key_value_heads=4,
        linear_attn_config={
            "kda_layers": [1],
            "full_attn_layers": [2],
            "num_heads": 2,
            "head_dim": 64,
            "short_conv_kernel_size": 4,
        },
        model_max_length=4096,
        pad_token_id=0,  # transformers' Kimi default (163839) lies outside SmolLM2's vocab
        **{k: v for k, v in MLA.items() if k != "q_lora_rank"},
        mla_use_nope=True,
        num_experts=4,
        num_experts_per_token=2,
        num_shared_experts=1,
        moe_intermediate_size=64,
        first_k_dense_replace=1,
        routed_scaling_factor=2.5,
    ),
    # Gemma 3: local (rotating) layer then a global one.
    _arch(
        "gemma3_text",
        ("sliding",),
        model_type="gemma3_text",
        num_hidden_layers=2,
        sliding_window=WINDOW,
        sliding_window_pattern=2,
        query_pre_attn_scalar=HEAD_DIM,
    ),
    # Gemma 4 (E2B/E4B-like): sliding/full alternating, the last two layers reuse the KV of
    # the last earlier layer of their type, per-layer input embeddings.
    _arch(
        "gemma4_text",
        ("sliding", "shared_kv"),
        model_type="gemma4_text",
        num_hidden_layers=4,
        layer_types=["sliding_attention", "full_attention"] * 2,
        num_kv_shared_layers=2,
        num_key_value_heads=1,
        global_head_dim=HEAD_DIM,
        sliding_window=WINDOW,
        hidden_size_per_layer_input=16,
        tie_word_embeddings=True,
    ),
]


def _gemma3n() -> Arch:
    """Gemma 3n in its multimodal wrapper (mlx-lm drops the towers): AltUp, Laurel, per-layer
    inputs, sliding and full layers, the last two sharing KV."""
    return _text(
        "gemma3n",
        ("sliding", "shared_kv"),
        "gemma3n",
        model_type="gemma3n_text",
        num_hidden_layers=4,
        layer_types=["sliding_attention", "full_attention"] * 2,
        num_kv_shared_layers=2,
        num_key_value_heads=1,
        sliding_window=WINDOW,
        rope_local_base_freq=10000.0,
        rope_theta=1000000.0,
        final_logit_softcapping=30.0,
        activation_sparsity_pattern=[0.95, 0.0, 0.0, 0.0],
        hidden_size_per_layer_input=16,
        altup_num_inputs=4,
        altup_coef_clip=120.0,
        altup_correct_scale=True,
        altup_active_idx=0,
        laurel_rank=16,
        tie_word_embeddings=True,
    )


_ARCHS.append(_gemma3n())

ARCHITECTURES: dict[str, Arch] = {arch.name: arch for arch in _ARCHS}


def _vocab_size(tokenizer_source: Path) -> int:
    tokenizer = json.loads((tokenizer_source / "tokenizer.json").read_text())
    return len(tokenizer["model"]["vocab"])


def _with_vocab(config: dict, vocab_size: int) -> dict:
    """The config with the tokenizer's vocabulary (and per-layer-input vocabulary) filled in,
    in text_config where there is one; head_dim left out where a family has none."""
    config = copy.deepcopy(config)
    text = config.get("text_config", config)
    text["vocab_size"] = vocab_size
    if "hidden_size_per_layer_input" in text:
        text["vocab_size_per_layer_input"] = vocab_size
    if text.get("head_dim", HEAD_DIM) is None:
        del text["head_dim"]
    return config


def build_architecture(
    name: str,
    tokenizer_source: Path,
    destination: Path,
    bits: int | None = 4,
    seed: int = 0,
) -> Path:
    """Writes a loadable model folder of this architecture with SmolLM2's tokenizer: random
    weights in the layout mlx-lm loads them (its sanitize leaves them as they are), quantized
    with mlx-lm's own quantize_model when `bits` is set (its routers kept at 8 bits, as the
    family's quant_predicate says)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.utils import quantize_model, save_config

    destination.mkdir(parents=True)
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_source / file, destination / file)
    config = _with_vocab(ARCHITECTURES[name].config, _vocab_size(tokenizer_source))
    mx.random.seed(seed)
    model = _instantiate(config)
    if bits is not None:
        with contextlib.redirect_stdout(io.StringIO()):  # its "[INFO] Quantized ..." line
            model, config = quantize_model(model, config, group_size=64, bits=bits)
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(destination / "model.safetensors"), weights, metadata={"format": "mlx"})
    save_config(config, destination / "config.json")
    return destination


def _instantiate(config: dict):
    import mlx.core as mx
    from mlx.utils import tree_flatten

    # Every model_type here is its own mlx-lm module (none goes through MODEL_REMAPPING).
    module = importlib.import_module(f"mlx_lm.models.{config['model_type']}")
    model = module.Model(module.ModelArgs.from_dict(config))
    if _tied(config):
        # Tied embeddings at transformers' init std (0.02), not mlx's 1/sqrt(hidden): a
        # full-size token embedding outweighs these random layers in the residual, and the
        # logits (h @ E.T) then pick the input token again: greedy decoding repeats it.
        model.load_weights(
            [
                (path, mx.random.normal(value.shape) * 0.02)
                for path, value in tree_flatten(model.parameters())
                if ".embed_tokens" in f".{path}" and path.endswith(".weight")
            ],
            strict=False,
        )
    mx.eval(model.parameters())
    return model


def _tied(config: dict) -> bool:
    return bool(config.get("text_config", config).get("tie_word_embeddings"))


def built(name: str, tokenizer_source: Path, tmp_path_factory, bits: int | None = 4) -> Path:
    """This architecture's folder, built once per test session."""
    key = (name, tokenizer_source, bits)
    if key not in _BUILT:
        folder = tmp_path_factory.mktemp("architectures") / name
        _BUILT[key] = build_architecture(name, tokenizer_source, folder, bits)
    return _BUILT[key]


_BUILT: dict[tuple[str, Path, int | None], Path] = {}
