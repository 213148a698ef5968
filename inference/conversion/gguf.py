"""Converts a Llama-architecture GGUF file into an MLX model directory.

The directory holds config.json (with per-module quantization), model.safetensors,
tokenizer.json and tokenizer_config.json, so mlx-lm loads it like any MLX model.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from inference.conversion.gguf_tokenizer import UnsupportedGGUF, build_tokenizer, tokenizer_config

__all__ = ["ConvertedModel", "UnsupportedGGUF", "convert_gguf", "inspect_gguf"]

SUPPORTED_ARCHITECTURES = {"llama"}
# What mx.load reads natively: quantized types arrive as MLX affine weight/scales/biases.
SUPPORTED_TENSOR_TYPES = {"F32", "F16", "Q4_0", "Q4_1", "Q8_0"}
# Those quantized types all scale blocks of 32 weights: MLX's group size.
GGUF_BLOCK = 32

_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_TENSOR = re.compile(r"^(?:blk\.(\d+)\.)?(\w+)\.(weight|scales|biases|bias)$")

# Chat-template markers that tell which family a model belongs to.
FAMILY_MARKERS = {
    "<|im_start|>": "chatml",
    "<|eot_id|>": "llama",
    "[INST]": "mistral",
    "<start_of_turn>": "gemma",
}

Progress = Callable[[Iterable], Iterable]


@dataclass(frozen=True)
class GGUFSummary:
    architecture: str
    name: str
    tensor_types: dict[str, int]


@dataclass(frozen=True)
class ConvertedModel:
    path: Path
    name: str
    family_slug: str | None
    context_length: int


def inspect_gguf(path: Path) -> GGUFSummary:
    """Reads the header only and refuses what the converter cannot handle, naming it."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)
    except Exception as exc:
        raise UnsupportedGGUF(f"{path} is not a readable GGUF file: {exc}") from exc
    architecture = _field(reader, "general.architecture")
    if architecture not in SUPPORTED_ARCHITECTURES:
        raise UnsupportedGGUF(
            f"architecture {architecture!r} is not supported "
            f"(supported: {', '.join(sorted(SUPPORTED_ARCHITECTURES))})"
        )
    types = Counter(t.tensor_type.name for t in reader.tensors)
    unsupported = sorted(set(types) - SUPPORTED_TENSOR_TYPES)
    if unsupported:
        raise UnsupportedGGUF(
            f"tensor types {', '.join(unsupported)} are not supported "
            f"(supported: {', '.join(sorted(SUPPORTED_TENSOR_TYPES))})"
        )
    if any(t.name == "rope_freqs.weight" for t in reader.tensors):
        raise UnsupportedGGUF("Llama 3.1-style rope scaling (rope_freqs) is not supported yet")
    name = _field(reader, "general.name") or path.stem
    return GGUFSummary(architecture, name, dict(types))


def _field(reader, key: str) -> str | None:
    field = reader.fields.get(key)
    return None if field is None else field.contents()


WEIGHT_FORMATS = ("quantized", "float16", "float32")


def convert_gguf(
    source: Path,
    destination: Path,
    progress: Progress = lambda it: it,
    weights: str = "quantized",
) -> ConvertedModel:
    """Writes into a temporary sibling directory, then renames: never a half-written model.

    weights: "quantized" keeps each tensor quantized (exactly where MLX has the same format,
    re-quantized otherwise); "float16"/"float32" dequantize everything ("keep float")."""
    if weights not in WEIGHT_FORMATS:
        raise UnsupportedGGUF(f"weights {weights!r}: choose one of {', '.join(WEIGHT_FORMATS)}")
    summary = inspect_gguf(source)
    if destination.exists():
        raise FileExistsError(f"{destination} already exists")
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}-", dir=destination.parent))
    try:
        converted = _convert_into(source, staging, summary, progress)
        staging.chmod(0o755)  # mkdtemp made it private
        staging.rename(destination)
    except BaseException:  # KeyboardInterrupt too: leave nothing behind
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return replace(converted, path=destination)


def _convert_into(
    source: Path, out: Path, summary: GGUFSummary, progress: Progress
) -> ConvertedModel:
    import mlx.core as mx

    state: dict = {}

    def read() -> None:
        raw, metadata = mx.load(str(source), return_metadata=True)
        state["metadata"] = {key: _plain(value) for key, value in metadata.items()}
        state["weights"] = {_mlx_name(name): array for name, array in raw.items()}

    def tokenizer() -> None:
        build_tokenizer(state["metadata"]).save(str(out / "tokenizer.json"))

    def configs() -> None:
        metadata = state["metadata"]
        vocab_size = len(metadata["tokenizer.ggml.tokens"])
        state["config"] = config = model_config(metadata, state["weights"], vocab_size)
        (out / "config.json").write_text(json.dumps(config, indent=2))
        tokenizer_json = json.dumps(tokenizer_config(metadata, config), indent=2)
        (out / "tokenizer_config.json").write_text(tokenizer_json)

    def weights() -> None:
        mx.save_safetensors(str(out / "model.safetensors"), state["weights"], {"format": "mlx"})

    # Cheap checks first, so a refused file fails before the long write.
    for step in progress([read, tokenizer, configs, weights]):
        step()
    family = family_from_template(state["metadata"].get("tokenizer.chat_template") or "")
    return ConvertedModel(out, summary.name, family, state["config"]["max_position_embeddings"])


def _plain(value):
    """mx.load gives scalars and arrays as mx.array; the rest of the code wants Python values."""
    if hasattr(value, "tolist"):
        return value.item() if value.size == 1 and value.ndim == 0 else value.tolist()
    return value


def _mlx_name(gguf_name: str) -> str:
    match = _TENSOR.match(gguf_name)
    if not match:
        raise UnsupportedGGUF(f"unexpected tensor {gguf_name!r}")
    layer, module, kind = match.groups()
    if layer is None:
        if module not in _TOP_NAMES:
            raise UnsupportedGGUF(f"unexpected tensor {gguf_name!r}")
        return f"{_TOP_NAMES[module]}.{kind}"
    if module not in _LAYER_NAMES:
        raise UnsupportedGGUF(f"unexpected tensor {gguf_name!r}")
    return f"model.layers.{layer}.{_LAYER_NAMES[module]}.{kind}"


def quantization_config(weights: dict) -> dict | None:
    """Bits of every quantized module, read off the packed shapes."""
    per_module = {}
    for name, scales in weights.items():
        if not name.endswith(".scales"):
            continue
        module = name.removesuffix(".scales")
        in_features = scales.shape[-1] * GGUF_BLOCK
        bits = weights[f"{module}.weight"].shape[-1] * 32 // in_features
        per_module[module] = {"group_size": GGUF_BLOCK, "bits": bits}
    if not per_module:
        return None
    common = Counter(q["bits"] for q in per_module.values()).most_common(1)[0][0]
    return {"group_size": GGUF_BLOCK, "bits": common, **per_module}


def model_config(metadata: dict, weights: dict, vocab_size: int) -> dict:
    arch = metadata["general.architecture"]

    def meta(key: str, default=None):
        return metadata.get(f"{arch}.{key}", default)

    hidden = int(meta("embedding_length"))
    heads = int(meta("attention.head_count"))
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "num_hidden_layers": int(meta("block_count")),
        "intermediate_size": int(meta("feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(meta("attention.head_count_kv", heads)),
        "head_dim": int(meta("attention.key_length", hidden // heads)),
        "rms_norm_eps": float(meta("attention.layer_norm_rms_epsilon", 1e-5)),
        "vocab_size": vocab_size,
        "max_position_embeddings": int(meta("context_length", 4096)),
        "rope_theta": float(meta("rope.freq_base", 10000.0)),
        # GGUF permutes Q/K rows for llama.cpp's interleaved rotary embedding.
        "rope_traditional": True,
        "tie_word_embeddings": "lm_head.weight" not in weights,
        "bos_token_id": metadata.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": metadata.get("tokenizer.ggml.eos_token_id"),
    }
    scaling = meta("rope.scaling.type")
    if scaling == "linear":
        config["rope_scaling"] = {"type": "linear", "factor": float(meta("rope.scaling.factor"))}
    elif scaling not in (None, "none"):
        raise UnsupportedGGUF(f"rope scaling {scaling!r} is not supported yet")
    quantization = quantization_config(weights)
    if quantization:
        config["quantization"] = quantization
    return config


def family_from_template(template: str) -> str | None:
    return next((slug for marker, slug in FAMILY_MARKERS.items() if marker in template), None)
