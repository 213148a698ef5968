"""Gemma 2 and Gemma 3 (text): norms after attention and the MLP as well as before, stored
as 1 + w; Gemma 4 (gguf_gemma4) builds on their layers."""

from __future__ import annotations

from inference.conversion.gguf_architecture import _ATTENTION, _MLP, _QK_NORM, Architecture, Hyper
from inference.conversion.gguf_config import _head_dim
from inference.conversion.gguf_file import UnsupportedGGUF

_GEMMA_LAYER = {
    "attn_norm": "input_layernorm",
    # llama.cpp's name for the norm after attention (ffn_norm is the one before the MLP)
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
    **_ATTENTION,
    **_MLP,
}


def _gemma_scale(hyper: Hyper, big_layers: int) -> int | float:
    # llama.cpp scales queries by 1/sqrt(hidden / heads) for the 27B models, by
    # 1/sqrt(head_dim) for the others; mlx-lm's query_pre_attn_scalar is that number, an
    # integer in transformers' config (which AutoTokenizer reads, and refuses a float in).
    if int(hyper("block_count")) == big_layers:
        scale = int(hyper("embedding_length")) / int(hyper("attention.head_count"))
        return int(scale) if scale.is_integer() else scale
    return _head_dim(hyper)


def _gemma2(hyper: Hyper) -> dict:
    return {
        "attn_logit_softcapping": float(hyper.get("attn_logit_softcapping", 50.0)),
        "final_logit_softcapping": float(hyper.get("final_logit_softcapping", 30.0)),
        "query_pre_attn_scalar": _gemma_scale(hyper, 46),
    }


def _gemma3(hyper: Hyper) -> dict:
    window = int(hyper.get("attention.sliding_window", 0) or 0)
    pattern = hyper.get("attention.sliding_window_pattern", 6)
    if isinstance(pattern, list):
        pattern = _every_nth_global(pattern, int(hyper("block_count")))
    config = {
        "query_pre_attn_scalar": _gemma_scale(hyper, 62),
        "rope_local_base_freq": float(hyper.get("rope.freq_base_swa", 10000.0)),
        "sliding_window": window or int(hyper("context_length")),
        "sliding_window_pattern": int(pattern) if window else 1,
    }
    if hyper.get("final_logit_softcapping"):
        config["final_logit_softcapping"] = float(hyper("final_logit_softcapping"))
    return config


def _every_nth_global(sliding: list, layers: int) -> int:
    """A per-layer pattern (true: sliding) as mlx-lm's one count: every n-th layer global,
    the others sliding, which is all mlx-lm's gemma3_text can compute."""
    sliding = [bool(s) for s in sliding[:layers]]
    if not any(sliding):
        return 1
    if all(sliding) or len(sliding) != layers:
        raise UnsupportedGGUF("a sliding window pattern without a global layer is not supported")
    n = sliding.index(False) + 1
    if sliding != [(i + 1) % n != 0 for i in range(layers)]:
        raise UnsupportedGGUF(
            "a sliding window pattern other than every n-th layer global is not supported"
        )
    return n


GEMMA_ARCHITECTURES: dict[str, Architecture] = {
    arch.gguf_name: arch
    for arch in (
        Architecture(
            "gemma2", "gemma2", "Gemma2ForCausalLM", _GEMMA_LAYER, _gemma2, 1.0, tied_only=True
        ),
        Architecture(
            "gemma3",
            "gemma3_text",
            "Gemma3ForCausalLM",
            _GEMMA_LAYER | _QK_NORM,
            _gemma3,
            1.0,
        ),
    )
}
