"""Writes a Hugging Face style checkpoint (config.json values and float32 tensors under their
Hugging Face names) as the GGUF file llama.cpp's converter (convert_hf_to_gguf.py, build 11434)
would make of it with `--outtype f32`: its tensor names (the gguf package's TensorNameMap, which
that converter uses), the metadata keys llama.cpp reads for the architecture, and the changes
the converter makes to the tensors (Llama's Q/K row permutation, Gemma's 1 + w norms, Llama 3's
rope_freqs, Phi-3's longrope factors). Written from the converter as a reference, for the
import tests; F32 throughout, so that llama.cpp computes in float32 (but for the float16 keys and
values of its flash attention).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path

import gguf
import numpy as np
from gguf import GGUFValueType, GGUFWriter

Tensors = Iterator[tuple[str, np.ndarray]]


def write_gguf(
    path: Path, arch: str, config: dict, weights: dict[str, np.ndarray], tokenizer: dict
) -> Path:
    """arch: the GGUF architecture; config: the checkpoint's config.json; weights: its tensors
    by Hugging Face name; tokenizer: `tokenizer.ggml.*` metadata to copy."""
    writer = GGUFWriter(str(path), arch)
    # Not the architecture's name: llama.cpp gives Phi-3's special tokens (</s>...) attributes
    # when the name says "phi3", and SmolLM2's vocabulary has none of them.
    writer.add_name("synthetic checkpoint")
    HYPERPARAMETERS[arch](writer, config)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    for key, value in tokenizer.items():
        _add_tokenizer_value(writer, key, value)
    for name, array in _converted_tensors(arch, config, weights):
        writer.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


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
    # llama3 scaling becomes the rope_freqs tensor instead (see _llama_tensors)
    writer.add_rope_freq_base(config["rope_theta"])
    if "rope_local_base_freq" in config:
        writer.add_rope_freq_base_swa(config["rope_local_base_freq"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    if config.get("head_dim") is not None:
        writer.add_key_length(config["head_dim"])
        writer.add_value_length(config["head_dim"])


def _llama(writer: GGUFWriter, config: dict) -> None:
    _text_model(writer, config)
    writer.add_vocab_size(config["vocab_size"])
    writer.add_rope_dimension_count(_head_dim(config))


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
    "gemma2": _gemma2,
    "gemma3": _gemma3,
    "phi3": _phi3,
}


# Tensors: what each converter class's modify_tensors and generate_extra_tensors yield.


def _converted_tensors(arch: str, config: dict, weights: dict[str, np.ndarray]) -> Tensors:
    """(GGUF name, values) of every tensor the converter writes."""
    names = gguf.get_tensor_name_map(_arch_enum(arch), config["num_hidden_layers"])
    for name, array in weights.items():
        if arch == "gemma2" and name == "lm_head.weight":
            continue  # Gemma 2's converter drops it: llama.cpp always ties
        if arch == "llama":
            array = _llama_permute(name, array, config)
        if arch in ("gemma2", "gemma3") and name.endswith("norm.weight"):
            array = array + 1.0  # Gemma's RMSNorm scales by 1 + w; llama.cpp's by w
        yield _gguf_name(names, name), array
    if arch == "llama":
        yield from _llama3_rope_freqs(config)
    if arch == "phi3":
        yield from _phi3_rope_factors(config)


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
