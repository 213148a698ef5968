"""Every GGUF architecture the importer maps, end to end: a small random model built from
mlx-lm's own model class is written as llama.cpp's converter would write that checkpoint
(tests/gguf_writer.py), imported with convert_gguf and loaded by mlx-lm. Its logits must be the
original's (float32 throughout), and its greedy continuation llama.cpp's on the same file
(tests/tools/llama_reference.cpp): llama.cpp arbitrates whether the writer or the importer is
wrong when they disagree."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from inference.conversion.gguf import convert_gguf
from inference.conversion.gguf_file import read_metadata
from tests.gguf_writer import write_gguf

if TYPE_CHECKING:
    import mlx.core as mx
    import mlx.nn as nn

VOCAB = 49152  # the demo GGUF's tokenizer: SmolLM2's
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


@dataclass(frozen=True)
class Case:
    """A checkpoint: the GGUF architecture llama.cpp's converter gives it, its config.json
    (which mlx-lm's ModelArgs reads too) and the seed of its random weights. Seeds are picked
    among the first few so that no greedy step is a near tie, which llama.cpp's float16
    attention could decide the other way (the smallest margin is 3x its noise or more)."""

    id: str
    arch: str
    config: dict
    seed: int


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
    # Qwen2: q/k/v biases.
    Case("qwen2", "qwen2", {"model_type": "qwen2", "num_attention_heads": 4,
         "num_key_value_heads": 2, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
         "tie_word_embeddings": False}, 2),
    # Qwen3: q/k norms, and heads * head_dim (512) unlike hidden_size (256).
    Case("qwen3", "qwen3", {"model_type": "qwen3", "num_attention_heads": 8,
         "num_key_value_heads": 4, "head_dim": 64, "rope_theta": 1000000.0,
         "rms_norm_eps": 1e-6, "tie_word_embeddings": True}, 0),
    # Gemma 2: four norms a layer, attention and final soft-capping. Its sliding window
    # (4096, as the real ones) is longer than the test: mlx-lm has none.
    Case("gemma2", "gemma2", {"model_type": "gemma2", "num_attention_heads": 8,
         "num_key_value_heads": 4, "head_dim": 64, "query_pre_attn_scalar": 64,
         "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "attn_logit_softcapping": 50.0,
         "final_logit_softcapping": 30.0, "sliding_window": 4096}, 4),
    # Gemma 3: q/k norms, five sliding layers (window 8, local rope base) then a global one
    # with the linear rope scaling of the 4B and larger models.
    Case("gemma3", "gemma3", {"model_type": "gemma3_text", "num_hidden_layers": 6,
         "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64,
         "query_pre_attn_scalar": 64, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
         "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "sliding_window": 8,
         "sliding_window_pattern": 6, "rms_norm_eps": 1e-6}, 0),
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
    greedy: list[int]
    margins: list[float]  # top-1 minus top-2 logit at each greedy step
    llama_cpp: dict  # llama-reference's JSON: argmax, last_logits, greedy


@pytest.fixture(scope="module")
def tokenizer_metadata(demo_gguf: Path) -> dict:
    metadata = read_metadata(demo_gguf)
    return {key: value for key, value in metadata.items() if key.startswith("tokenizer.ggml.")}


@pytest.fixture(scope="module", params=CASES, ids=[case.id for case in CASES])
def outcome(request, tokenizer_metadata, llama_tools, tmp_path_factory) -> Iterator[Outcome]:
    from mlx_lm.utils import load_model

    case: Case = request.param
    config = {**COMMON, **case.config}
    folder = tmp_path_factory.mktemp(case.id)
    original = build_model(config, case.seed)
    weights = {name: np.array(value) for name, value in _parameters(original).items()}
    source = write_gguf(folder / "model.gguf", case.arch, config, weights, tokenizer_metadata)
    imported, _ = load_model(convert_gguf(source, folder / "imported", weights="float32").path)
    greedy, margins = greedy_decode(imported, PROMPT, GREEDY)
    yield Outcome(
        original_logits=prompt_logits(original, PROMPT),
        imported_logits=prompt_logits(imported, PROMPT),
        greedy=greedy,
        margins=margins,
        llama_cpp=llama_reference(llama_tools, source, PROMPT, GREEDY),
    )
    shutil.rmtree(folder)  # a few hundred MB of float32 per case


def test_logits_match_the_original(outcome: Outcome):
    scale = np.abs(outcome.original_logits).max()
    difference = np.abs(outcome.imported_logits - outcome.original_logits).max()
    assert difference <= LOGITS_TOLERANCE * scale, f"max diff {difference:.3g}, scale {scale:.3g}"


def test_greedy_matches_llama_cpp(outcome: Outcome):
    assert outcome.greedy == outcome.llama_cpp["greedy"], f"our margins {outcome.margins}"


def test_last_logits_close_to_llama_cpp(outcome: Outcome):
    reference = np.array(outcome.llama_cpp["last_logits"], dtype=np.float32)
    scale = np.abs(reference).max()
    difference = np.abs(outcome.imported_logits[-1] - reference).max()
    message = f"max diff {difference:.3g}, scale {scale:.3g}"
    assert difference <= LLAMA_CPP_TOLERANCE * scale, message


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
    model.update(tree_unflatten(list(values.items())))
    mx.eval(model.parameters())
    return model


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
    if name.endswith("norm.weight"):
        scale = final_norm if name == "model.norm.weight" else 1.0
        values = scale * (1 + 0.2 * rng.standard_normal(shape, dtype=np.float32))
        # Gemma's norms hold w and scale by 1 + w
        return values - 1 if config["model_type"].startswith("gemma") else values
    values = rng.standard_normal(shape, dtype=np.float32)
    if name.endswith(".bias"):
        return 0.5 * values
    if "embed_tokens" in name or "lm_head" in name:
        return embedding * values
    return values / np.sqrt(shape[-1])


def _parameters(model: nn.Module) -> dict[str, mx.array]:
    from mlx.utils import tree_flatten

    return dict(tree_flatten(model.parameters()))


def prompt_logits(model: nn.Module, prompt: list[int]) -> np.ndarray:
    import mlx.core as mx

    return np.array(model(mx.array([prompt]))[0].astype(mx.float32))


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
