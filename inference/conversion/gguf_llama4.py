"""Llama 4 (llama.cpp's llama4, text only: Scout, Maverick): three of every four layers attend
within chunks and rotate, the fourth attends globally without rope and scales its queries by a
temperature that grows with position; the rotating layers normalize queries and keys (an RMS
norm without weight, Llama4TextL2Norm; not in the 128-expert model); every n-th layer is a
mixture of experts, routed top-1 by sigmoid with the weight applied to the expert's input,
beside a shared expert. mlx-lm's llama4 runs it (its llama4_text is another model: no
experts); its sanitize only splits a checkpoint's fused experts, which llama.cpp's converter
already split: the import writes mlx-lm's names.

llama.cpp hard-codes most of this rather than reading the file: chunks of 8192, the
temperature's floor 8192 and scale 0.1, no rope every 4th layer, the q/k norm unless there
are 128 experts, sigmoid routing without renormalization or scale. config.json says exactly
that; what mlx-lm hard-codes otherwise (a file that turns chunking off, other patterns, more
than one expert a token) is refused. One difference stays: mlx-lm's q/k norm adds 1e-6 to
the mean square where llama.cpp adds the file's norm epsilon (1e-5 for Meta's models), a
relative change of about 5e-6 / (the mean square of a head's query), which is small against
the quantization error of any GGUF.

Registered, with the other families, in gguf_registry.
"""

from __future__ import annotations

from inference.conversion.gguf_architecture import Architecture, Hyper
from inference.conversion.gguf_config import _feed_forward, _head_dim, _kv_heads, _rope_scaling
from inference.conversion.gguf_file import UnsupportedGGUF, read_tensor_f32
from inference.conversion.gguf_llama import llama3_rope_scaling

_FEED_FORWARD = "feed_forward"
_LLAMA4_LAYER = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    # dense layers
    "ffn_gate": f"{_FEED_FORWARD}.gate_proj",
    "ffn_up": f"{_FEED_FORWARD}.up_proj",
    "ffn_down": f"{_FEED_FORWARD}.down_proj",
    # mixture layers: the router, the experts stacked [experts, out, in] as mlx-lm's
    # SwitchGLU holds them, and the shared expert
    "ffn_gate_inp": f"{_FEED_FORWARD}.router",
    "ffn_gate_exps": f"{_FEED_FORWARD}.experts.gate_proj",
    "ffn_up_exps": f"{_FEED_FORWARD}.experts.up_proj",
    "ffn_down_exps": f"{_FEED_FORWARD}.experts.down_proj",
    "ffn_gate_shexp": f"{_FEED_FORWARD}.shared_expert.gate_proj",
    "ffn_up_shexp": f"{_FEED_FORWARD}.shared_expert.up_proj",
    "ffn_down_shexp": f"{_FEED_FORWARD}.shared_expert.down_proj",
}
_TOP = {
    "token_embd": "language_model.model.embed_tokens",
    "output_norm": "language_model.model.norm",
    "output": "language_model.lm_head",
}

# What llama.cpp's llama4 sets whatever the file says (unless it turns chunking off).
CHUNK = 8192
TEMPERATURE_FLOOR = 8192
TEMPERATURE_SCALE = 0.1
GLOBAL_EVERY = 4  # llama.cpp's and mlx-lm's: every 4th layer global and without rope
_NO_QK_NORM_EXPERTS = 128  # llama.cpp leaves the q/k norm out for Maverick (128 experts)


def _llama4(hyper: Hyper) -> dict:
    """config.json's text_config, which mlx-lm's llama4 reads (the top level's sizes, written
    for every architecture, stay for the engine's context length)."""
    _refuse_unchunked(hyper)
    _refuse_other_attention(hyper)
    experts = _llama4_experts(hyper)
    heads = int(hyper("attention.head_count"))
    text = {
        "model_type": "llama4_text",
        "hidden_size": int(hyper("embedding_length")),
        "num_hidden_layers": _layers(hyper),
        "num_attention_heads": heads,
        "num_key_value_heads": _kv_heads(hyper, LLAMA4_ARCHITECTURES["llama4"], heads),
        "head_dim": _head_dim(hyper),
        "intermediate_size_mlp": _feed_forward(hyper),  # the dense layers'
        "rms_norm_eps": float(hyper("attention.layer_norm_rms_epsilon", 1e-5)),
        "vocab_size": _vocab_size(hyper),
        "max_position_embeddings": int(hyper("context_length", 4096)),
        "rope_theta": float(hyper("rope.freq_base", 10000.0)),
        "rope_scaling": _llama4_rope_scaling(hyper),
        "attention_bias": False,
        "attention_chunk_size": CHUNK,
        "attn_temperature_tuning": True,
        "floor_scale": TEMPERATURE_FLOOR,
        "attn_scale": TEMPERATURE_SCALE,
        "use_qk_norm": experts["num_local_experts"] != _NO_QK_NORM_EXPERTS,
        "tie_word_embeddings": False,
        **experts,
    }
    return {"text_config": text, "tie_word_embeddings": False}


def _layers(hyper: Hyper) -> int:
    layers = int(hyper("block_count"))
    if layers < GLOBAL_EVERY:
        # mlx-lm's llama4 reads its global layers' mask from the 4th layer's cache
        raise UnsupportedGGUF(f"llama4 with fewer than {GLOBAL_EVERY} layers is not supported")
    return layers


def _vocab_size(hyper: Hyper) -> int:
    """As gguf.py counts it: the embeddings' rows (a converter may pad them), else the tokens."""
    embeddings = hyper.file.tensor("token_embd.weight")
    if embeddings is not None:
        return int(embeddings.shape[0])
    return len(hyper.file.metadata["tokenizer.ggml.tokens"])


def _refuse_unchunked(hyper: Hyper) -> None:
    """A file saying sliding_window 0 (MobileLLM-R1) makes llama.cpp attend globally, rope all
    layers but the last and scale no queries; any other window it replaces by CHUNK. mlx-lm's
    llama4 always chunks and leaves every 4th layer unrotated."""
    window = hyper.get("attention.sliding_window")
    if window is not None and int(window) == 0:
        raise UnsupportedGGUF(
            "llama4 without chunked attention (sliding_window 0) is not supported: mlx-lm's "
            "llama4 always chunks and leaves every 4th layer without rope"
        )
    pattern = hyper.get("attention.sliding_window_pattern")
    layers = int(hyper("block_count"))
    expected = [(i + 1) % GLOBAL_EVERY != 0 for i in range(layers)]
    if isinstance(pattern, list):
        matches = [bool(chunked) for chunked in pattern[:layers]] == expected
    else:
        matches = pattern is None or int(pattern) == GLOBAL_EVERY
    if not matches:
        raise UnsupportedGGUF(
            f"llama4 with chunked layers other than 3 of every {GLOBAL_EVERY} is not supported "
            "(mlx-lm's llama4 fixes that pattern)"
        )


def _refuse_other_attention(hyper: Hyper) -> None:
    file = hyper.file
    if file.tensor("output.weight") is None:
        # llama.cpp then reuses the embeddings; mlx-lm's llama4 always has its own lm_head
        raise UnsupportedGGUF("llama4 with tied embeddings is not supported")
    if file.tensor("blk.0.attn_q.bias") is not None:
        # llama.cpp's llama4 has q/k/v biases without an output bias, mlx-lm all four or none
        raise UnsupportedGGUF("llama4 with attention biases is not supported")
    base = float(hyper("rope.freq_base", 10000.0))
    if float(hyper.get("rope.freq_base_swa", base)) != base:
        raise UnsupportedGGUF("llama4 with a rope base of its own for chunked layers")
    if int(hyper.get("rope.dimension_count", _head_dim(hyper))) != _head_dim(hyper):
        raise UnsupportedGGUF("llama4 rotating only part of a head is not supported")


def _llama4_rope_scaling(hyper: Hyper) -> dict | None:
    """Meta's llama3 scaling (the converter's rope_freqs tensor) or a linear factor; llama.cpp
    would apply both if a file had both."""
    scaling = _rope_scaling(hyper)
    rope_freqs = hyper.file.tensor("rope_freqs.weight")
    if scaling is not None and (scaling["type"] != "linear" or rope_freqs is not None):
        raise UnsupportedGGUF(f"llama4 with {scaling['type']} rope scaling is not supported")
    if rope_freqs is None:
        return scaling
    factors = read_tensor_f32(hyper.file.path, rope_freqs)
    return llama3_rope_scaling(factors, float(hyper("rope.freq_base", 10000.0)), _head_dim(hyper))


def _llama4_experts(hyper: Hyper) -> dict:
    """llama.cpp's llama4 routes each token to its top expert by the router's logit, weights
    the expert's input by the sigmoid of that logit (no renormalization, no scale, whatever
    the file says): mlx-lm's llama4 MoE, which takes one expert only."""
    count = int(hyper.get("expert_count", 0) or 0)
    if not count:
        raise UnsupportedGGUF("llama4 without experts is not supported")
    used = hyper("expert_used_count")
    if isinstance(used, list) or int(used) != 1:
        raise UnsupportedGGUF("llama4 with more than one expert a token is not supported")
    if int(hyper.get("expert_group_count", 0) or 0) > 1:
        raise UnsupportedGGUF("llama4 with expert groups is not supported")
    step = int(hyper("interleave_moe_layer_step"))
    if step < 1:
        raise UnsupportedGGUF("llama4 without mixture layers is not supported")
    length = hyper("expert_feed_forward_length")
    if isinstance(length, list):
        raise UnsupportedGGUF("per-layer expert sizes are not supported yet")
    return {
        "num_local_experts": count,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": step,
        # the experts' and the shared expert's size (llama.cpp's shared expert has the same)
        "intermediate_size": int(length),
    }


LLAMA4_ARCHITECTURES = {
    "llama4": Architecture(
        "llama4",
        "llama4",
        "Llama4ForConditionalGeneration",
        _LLAMA4_LAYER,
        _llama4,
        # llama.cpp's converter does not permute Llama 4's Q/K rows: Meta's checkpoint rotates
        # adjacent pairs, as llama.cpp and mlx-lm's llama4 (traditional rope) do.
        rope_traditional=True,
        config_tensors=("rope_freqs.weight",),
        layer_prefix="language_model.model.layers",
        top_names=_TOP,
    ),
}
