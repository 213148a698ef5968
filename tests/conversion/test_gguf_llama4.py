"""Llama 4's config.json after import: what llama.cpp's llama4 hard-codes rather than reads
from the file (chunks, the attention temperature, the q/k norm by expert count), which the
tiny models of test_gguf_architectures cannot reach (their prompts end far inside the first
chunk); and the engine's limit that follows from it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from inference.conversion.gguf import convert_gguf
from inference.conversion.gguf_file import read_metadata
from inference.engine.vocabulary import chunk_context_limit
from tests.conversion.test_gguf_architectures import (
    COMMON,
    LLAMA4,
    LLAMA4_TEXT,
    _parameters,
    build_model,
)
from tests.support.gguf_writer import write_gguf

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent


@pytest.fixture(scope="module")
def tokenizer_metadata(demo_gguf: Path) -> dict:
    metadata = read_metadata(demo_gguf)
    return {key: value for key, value in metadata.items() if key.startswith("tokenizer.ggml.")}


def _imported_config(text_change: dict, tokenizer_metadata: dict, folder: Path) -> dict:
    config = {**COMMON, **LLAMA4, "text_config": LLAMA4_TEXT | text_change}
    weights = {name: np.array(value) for name, value in _parameters(build_model(config, 0)).items()}
    source = write_gguf(folder / "model.gguf", "llama4", config, weights, tokenizer_metadata)
    imported = convert_gguf(source, folder / "imported", weights="float32").path
    return json.loads((imported / "config.json").read_text())


def test_chunks_and_temperature_are_llama_cpp_constants(tokenizer_metadata, tmp_path):
    # a checkpoint with other values: the converter does not write them, llama.cpp fixes them
    change = {"attention_chunk_size": 1024, "floor_scale": 512, "attn_scale": 0.5}
    config = _imported_config(change, tokenizer_metadata, tmp_path)
    text = config["text_config"]
    assert config["model_type"] == "llama4"
    assert (text["attention_chunk_size"], text["floor_scale"], text["attn_scale"]) == (
        8192,
        8192,
        0.1,
    )
    assert text["attn_temperature_tuning"] and text["use_qk_norm"]
    assert (text["num_experts_per_tok"], text["interleave_moe_layer_step"]) == (1, 2)
    # the engine serves the first chunk, below the first temperature step
    assert chunk_context_limit(config) == 8191


def test_no_qk_norm_with_128_experts(tokenizer_metadata, tmp_path):
    """llama.cpp leaves Maverick's (128 experts) q/k norm out, whatever the checkpoint says."""
    small = {"hidden_size": 64, "num_attention_heads": 1, "num_key_value_heads": 1}
    experts = {"num_local_experts": 128, "intermediate_size": 32, "intermediate_size_mlp": 64}
    config = _imported_config(small | experts, tokenizer_metadata, tmp_path)
    assert config["text_config"]["use_qk_norm"] is False
