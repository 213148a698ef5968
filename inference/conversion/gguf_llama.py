"""Llama-like dense families: Llama (Llama 3's rope scaling recovered from rope_freqs),
Ministral 3 and Phi-3."""

from __future__ import annotations

import math

import numpy as np

from inference.conversion.gguf_architecture import _ATTENTION, _MLP, Architecture, Hyper
from inference.conversion.gguf_config import _head_dim, _rope_scaling
from inference.conversion.gguf_file import UnsupportedGGUF, read_tensor_f32

_LLAMA_LAYER = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    **_ATTENTION,
    **_MLP,
}

_PHI3_LAYER = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_qkv": "self_attn.qkv_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_up": "mlp.gate_up_proj",  # gate and up fused, gate first, as Phi-3 itself has them
    "ffn_down": "mlp.down_proj",
}


def _llama(hyper: Hyper) -> dict:
    config: dict = {}
    if hyper.file.tensor("blk.0.attn_q.bias") is not None:
        config["attention_bias"] = True
    rope_freqs = hyper.file.tensor("rope_freqs.weight")
    if rope_freqs is not None:
        factors = read_tensor_f32(hyper.file.path, rope_freqs)
        config["rope_scaling"] = llama3_rope_scaling(
            factors, float(hyper("rope.freq_base", 10000.0)), _head_dim(hyper)
        )
    return config


def _mistral3(hyper: Hyper) -> dict:
    """Ministral 3 (mlx-lm's ministral3): Llama's layers, YaRN and Llama 4's attention
    temperature, both in rope_parameters."""
    if hyper.file.tensor("blk.0.attn_q.bias") is not None:
        raise UnsupportedGGUF("mistral3 with attention biases is not supported")
    if hyper.get("attention.sliding_window"):
        raise UnsupportedGGUF("mistral3 with a sliding window is not supported")
    context = int(hyper("context_length"))
    scaling = _rope_scaling(hyper) or {"type": "default"}
    if scaling["type"] not in ("default", "yarn"):
        raise UnsupportedGGUF(f"mistral3 with {scaling['type']} rope scaling is not supported")
    rope_type = scaling.pop("type")
    return {
        "rope_parameters": scaling
        | {
            "rope_type": rope_type,
            "rope_theta": float(hyper("rope.freq_base", 10000.0)),
            # llama.cpp's temperature counts in original contexts (of YaRN's, which it needs)
            "llama_4_scaling_beta": float(hyper.get("attention.temperature_scale", 0.0) or 0.0),
            "original_max_position_embeddings": int(
                hyper.get("rope.scaling.original_context_length", context)
            ),
        },
    }


def _mistral3_rows(hyper: Hyper, key: str) -> tuple | None:
    """The converter interleaved each head's two halves of Q's and K's rows (Llama's
    permutation); mlx-lm's ministral3 rotates halves, so each row goes back."""
    if key not in ("attn_q.weight", "attn_k.weight"):
        return None
    heads = int(hyper("attention.head_count"))
    if key == "attn_k.weight":
        heads = int(hyper("attention.head_count_kv", heads))
    half = _head_dim(hyper) // 2
    return tuple(
        (h * 2 * half + 2 * i + j, h * 2 * half + j * half + i, 1)
        for h in range(heads)
        for i in range(half)
        for j in range(2)
    )


def _phi3(hyper: Hyper) -> dict:
    head_dim = _head_dim(hyper)
    config: dict = {
        "partial_rotary_factor": int(hyper.get("rope.dimension_count", head_dim)) / head_dim,
        "original_max_position_embeddings": int(
            hyper.get("rope.scaling.original_context_length", hyper("context_length"))
        ),
    }
    long, short = (hyper.file.tensor(f"rope_factors_{k}.weight") for k in ("long", "short"))
    if long is not None and short is not None:
        config["rope_scaling"] = {
            "type": "longrope",
            "long_factor": read_tensor_f32(hyper.file.path, long).tolist(),
            "short_factor": read_tensor_f32(hyper.file.path, short).tolist(),
        }
    return config


def _llama3_factors(params: dict, base: float, dims: int) -> np.ndarray:
    """Llama 3's rotary frequency divisors from its rope_scaling parameters."""
    old, low, high = params["original_max_position_embeddings"], 1.0, params["high_freq_factor"]
    factor = params["factor"]
    wavelen = 2 * math.pi * base ** (np.arange(0, dims, 2, dtype=np.float64) / dims)
    smooth = (old / wavelen - low) / (high - low)
    middle = 1 / ((1 - smooth) / factor + smooth)
    return np.where(wavelen < old / high, 1.0, np.where(wavelen > old / low, factor, middle))


def llama3_rope_scaling(factors: np.ndarray, base: float, dims: int) -> dict:
    """Recovers Llama 3's rope_scaling from the divisors llama.cpp's converter stored in
    rope_freqs. The divisors depend on (original context, low, high) only through
    old/low and old/high, so low is fixed at 1 and the other two are fitted."""
    factors = np.asarray(factors, dtype=np.float64)
    factor = float(factors.max())
    wavelen = 2 * math.pi * base ** (np.arange(0, dims, 2, dtype=np.float64) / dims)
    middle = (factors > 1 + 1e-6) & (factors < factor - 1e-6)
    if middle.sum() >= 2:
        # 1/r = (1 - s)/factor + s, and s = (old/wavelen - 1)/(high - 1): linear in 1/wavelen.
        smooth = (1 / factors[middle] - 1 / factor) / (1 - 1 / factor)
        slope, intercept = np.polyfit(1 / wavelen[middle], smooth, 1)
        high = 1 - 1 / intercept
        old = -slope / intercept
    else:  # no transition band: place both edges between the last 1 and the first `factor`
        ones, scaled = wavelen[factors <= 1 + 1e-6], wavelen[factors >= factor - 1e-6]
        if len(ones) == 0 or len(scaled) == 0 or ones.max() >= scaled.min():
            raise UnsupportedGGUF("rope_freqs does not follow Llama 3's rope scaling")
        old = float(scaled.min()) * 0.999
        high = old / (float(ones.max()) * 1.001)
    params = {
        "rope_type": "llama3",
        "factor": factor,
        "low_freq_factor": 1.0,
        "high_freq_factor": float(high),
        "original_max_position_embeddings": float(old),
    }
    if not np.allclose(_llama3_factors(params, base, dims), factors, rtol=1e-4, atol=1e-5):
        raise UnsupportedGGUF("rope_freqs does not follow Llama 3's rope scaling")
    return params


LLAMA_ARCHITECTURES: dict[str, Architecture] = {
    arch.gguf_name: arch
    for arch in (
        Architecture(
            "llama",
            "llama",
            "LlamaForCausalLM",
            _LLAMA_LAYER,
            _llama,
            rope_traditional=True,
            config_tensors=("rope_freqs.weight",),
        ),
        Architecture(
            "mistral3",
            "ministral3",
            "Ministral3ForCausalLM",
            _LLAMA_LAYER,
            _mistral3,
            row_segments=_mistral3_rows,
        ),
        Architecture(
            "phi3",
            "phi3",
            "Phi3ForCausalLM",
            _PHI3_LAYER,
            _phi3,
            config_tensors=("rope_factors_long.weight", "rope_factors_short.weight"),
        ),
    )
}
