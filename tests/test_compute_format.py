"""The compute-format policy: float32 on a Linux CPU with OpenBLAS, same greedy outputs."""

import pytest
from mlx_lm import load

from inference import blas
from inference.engine import compute_format
from inference.engine.compute_format import FormatChoice, choose, float32_bytes
from inference.engine.types import ModelSpec, SamplingParams
from tests.helpers import quantize_model_dir, run_job

PROMPTS = ["What is the capital of France?", "Name three colours.", "Write a haiku about the sea."]


@pytest.fixture(scope="module")
def smol(smollm_dir):
    return load(str(smollm_dir))[0]


def test_float32_estimate_matches_the_conversion(smollm_dir):
    model = load(str(smollm_dir))[0]
    estimate = float32_bytes(model)
    converted = compute_format.apply(model, FormatChoice("float32", "test"))
    assert estimate == float32_bytes(converted) == 538_060_032


def test_policy(smol, monkeypatch):
    assert choose("quantized", smol, 2**40).format == "stored"
    assert choose("float16", smol, 2**40).format == "float16"
    if blas.status().library:
        assert choose("auto", smol, 2**40) == FormatChoice(
            "float32", "CPU backend with an optimized BLAS, and it fits"
        )
    tight = choose("auto", smol, 100 * 2**20)
    assert tight.format == "stored"
    assert "more than the 100 MiB left" in tight.reason
    monkeypatch.setattr(blas, "_status", blas.BlasStatus(None, "disabled by BLAS_PRELOAD=false"))
    assert choose("auto", smol, 2**40) == FormatChoice(
        "stored", "no optimized BLAS (disabled by BLAS_PRELOAD=false)"
    )


def test_float32_answers_like_the_stored_4bit_model(engine, smollm_dir):
    params = SamplingParams(temperature=0, max_tokens=32)
    for prompt in PROMPTS:
        answers = [
            run_job(
                engine,
                ModelSpec(f"smol-{fmt}", str(smollm_dir), compute_format=fmt),
                prompt,
                params,
            )
            for fmt in ("quantized", "float32")
        ]
        (stored_text, stored_done), (f32_text, f32_done) = answers
        assert f32_text == stored_text
        assert f32_done.completion_tokens == stored_done.completion_tokens
    formats = {m.id: m.compute_format for m in engine.state.models}
    assert formats["smol-quantized"] == "stored"
    assert formats["smol-float32"] == "float32"


def test_float32_answers_like_a_quantized_tiny_model(engine, tiny_dir, tmp_path):
    quantized = quantize_model_dir(tiny_dir, tmp_path / "tiny-4bit")
    params = SamplingParams(temperature=0, max_tokens=16, logit_bias={2: -100.0})
    for prompt in ["Hello", "Tell me a story.", "What is 2+2?"]:
        stored, f32 = (
            run_job(
                engine, ModelSpec(f"tq-{fmt}", str(quantized), compute_format=fmt), prompt, params
            )[0]
            for fmt in ("quantized", "float32")
        )
        assert f32 == stored
