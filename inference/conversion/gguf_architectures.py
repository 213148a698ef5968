"""Each GGUF architecture we import: the mlx-lm model it becomes, its config.json, and how
llama.cpp's converter renamed and changed its tensors (so we can undo it)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from inference.conversion.gguf_file import GGUFFile, UnsupportedGGUF, read_tensor_f32

_ATTENTION = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
}
_MLP = {"ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
_QK_NORM = {"attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
_LLAMA_LAYER = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    **_ATTENTION,
    **_MLP,
}
_GEMMA_LAYER = {
    "attn_norm": "input_layernorm",
    # llama.cpp's name for the norm after attention (ffn_norm is the one before the MLP)
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
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
TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


class Hyper:
    """The architecture's hyperparameters: `hyper("block_count")` reads `<arch>.block_count`."""

    def __init__(self, file: GGUFFile, arch: str) -> None:
        self.file, self.arch, self.metadata = file, arch, file.metadata

    def __call__(self, key: str, default=None):
        value = self.metadata.get(f"{self.arch}.{key}", default)
        if value is None:
            raise UnsupportedGGUF(f"the file has no {self.arch}.{key}")
        return value

    def get(self, key: str, default=None):
        return self.metadata.get(f"{self.arch}.{key}", default)


@dataclass(frozen=True)
class Architecture:
    gguf_name: str
    model_type: str
    hf_class: str
    layer_names: dict[str, str]
    extra_config: Callable[[Hyper], dict]
    # Gemma's RMSNorm multiplies by (1 + w); llama.cpp's converter stores 1 + w.
    norm_offset: float = 0.0
    # llama.cpp's converter permutes Llama's Q/K rows for interleaved (GPT-J style) rotary
    # embeddings: mlx-lm's `traditional` rope is that same layout, so no weights are touched.
    rope_traditional: bool = False
    # Tensors that fold into config.json rather than weights.
    config_tensors: tuple[str, ...] = field(default=())
    tied_only: bool = False  # the mlx-lm model has no separate output projection

    def mlx_name(self, gguf_name: str) -> str | None:
        """None for a tensor folded into the config."""
        if gguf_name in self.config_tensors:
            return None
        parts = gguf_name.split(".")
        if len(parts) == 4 and parts[0] == "blk" and parts[2] in self.layer_names:
            return f"model.layers.{parts[1]}.{self.layer_names[parts[2]]}.{parts[3]}"
        if len(parts) == 2 and parts[0] in TOP_NAMES:
            return f"{TOP_NAMES[parts[0]]}.{parts[1]}"
        raise UnsupportedGGUF(f"unexpected tensor {gguf_name!r} for architecture {self.gguf_name}")


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


def _gemma_scale(hyper: Hyper, big_layers: int) -> float:
    # llama.cpp scales queries by 1/sqrt(hidden / heads) for the 27B models, by
    # 1/sqrt(head_dim) for the others; mlx-lm's query_pre_attn_scalar is that number.
    if int(hyper("block_count")) == big_layers:
        return int(hyper("embedding_length")) / int(hyper("attention.head_count"))
    return float(_head_dim(hyper))


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
        raise UnsupportedGGUF("a per-layer sliding window pattern is not supported yet")
    config = {
        "query_pre_attn_scalar": _gemma_scale(hyper, 62),
        "rope_local_base_freq": float(hyper.get("rope.freq_base_swa", 10000.0)),
        "sliding_window": window or int(hyper("context_length")),
        "sliding_window_pattern": int(pattern) if window else 1,
    }
    if hyper.get("final_logit_softcapping"):
        config["final_logit_softcapping"] = float(hyper("final_logit_softcapping"))
    return config


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


ARCHITECTURES = {
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
        Architecture("qwen2", "qwen2", "Qwen2ForCausalLM", _LLAMA_LAYER, lambda h: {}),
        Architecture("qwen3", "qwen3", "Qwen3ForCausalLM", _LLAMA_LAYER | _QK_NORM, lambda h: {}),
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


def architecture_of(file: GGUFFile) -> Architecture:
    name = file.metadata.get("general.architecture")
    if name not in ARCHITECTURES:
        raise UnsupportedGGUF(
            f"architecture {name!r} is not supported "
            f"(supported: {', '.join(sorted(ARCHITECTURES))}; Mistral's files use 'llama')"
        )
    return ARCHITECTURES[name]


def _head_dim(hyper: Hyper) -> int:
    default = int(hyper("embedding_length")) // int(hyper("attention.head_count"))
    return int(hyper.get("attention.key_length", default))


def model_config(file: GGUFFile, arch: Architecture, vocab_size: int) -> dict:
    hyper = Hyper(file, arch.gguf_name)
    heads = int(hyper("attention.head_count"))
    if isinstance(hyper("attention.head_count_kv", heads), list):
        raise UnsupportedGGUF("per-layer key/value head counts are not supported yet")
    config = {
        "architectures": [arch.hf_class],
        "model_type": arch.model_type,
        "hidden_size": int(hyper("embedding_length")),
        "num_hidden_layers": int(hyper("block_count")),
        "intermediate_size": int(hyper("feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(hyper("attention.head_count_kv", heads)),
        "head_dim": _head_dim(hyper),
        "rms_norm_eps": float(hyper("attention.layer_norm_rms_epsilon", 1e-5)),
        "vocab_size": vocab_size,
        "max_position_embeddings": int(hyper("context_length", 4096)),
        "rope_theta": float(hyper("rope.freq_base", 10000.0)),
        "rope_traditional": arch.rope_traditional,
        "tie_word_embeddings": file.tensor("output.weight") is None,
        "bos_token_id": file.metadata.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": file.metadata.get("tokenizer.ggml.eos_token_id"),
    }
    if arch.tied_only and not config["tie_word_embeddings"]:
        raise UnsupportedGGUF(f"{arch.gguf_name} with a separate output.weight is not supported")
    scaling = _rope_scaling(hyper)
    if scaling:
        config["rope_scaling"] = scaling
    config.update(arch.extra_config(hyper))
    return config


def _rope_scaling(hyper: Hyper) -> dict | None:
    kind = hyper.get("rope.scaling.type")
    if kind in (None, "none"):
        return None
    factor = float(hyper("rope.scaling.factor"))
    if kind == "linear":
        return {"type": "linear", "factor": factor}
    if kind == "yarn":
        original = int(hyper("rope.scaling.original_context_length"))
        return {"type": "yarn", "factor": factor, "original_max_position_embeddings": original}
    raise UnsupportedGGUF(f"rope scaling {kind!r} is not supported (supported: linear, yarn)")


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
