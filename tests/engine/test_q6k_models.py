"""A Q4_K_M GGUF (llama-quantize's mixture: Q6_K for the output head and some down and value
projections) imported and served: its Q6_K layers stay 6-bit in the CPU kernels where they
have the path (AVX-512 VNNI), and compute closer to the GGUF than the 8-bit they became
before; everywhere else they become MLX's 8-bit at load; what they became shows in the
model's format reason (/health, admin, the dashboard)."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import make_prompt_cache

from inference.conversion.gguf import convert_gguf
from inference.engine import cpu, q6k
from inference.engine.config import EngineConfig
from inference.engine.cpu import fused
from inference.engine.cpu.q6k_weights import Q6KEmbedding, Q6KLinear
from inference.engine.state import EngineHealth
from inference.engine.types import ModelSpec, SamplingParams
from inference.engine.worker import Engine
from inference.serving.control import health_document
from tests.support.helpers import quantize_gguf, run_job, write_small_llama

pytestmark = pytest.mark.database_independent
VNNI = cpu.kernel_status().q6k is None
IDS = mx.array([list(range(100, 228))])


@pytest.fixture(scope="module")
def q4km(tmp_path_factory, demo_gguf: Path, llama_tools: Path) -> Path:
    """A random Llama whose widths take every K-quant (so Q4_K_M is Q4_K and Q6_K only), with
    SmolLM2's whole vocabulary (the engine's prompts use all of it)."""
    folder = tmp_path_factory.mktemp("q6k")
    small = write_small_llama(folder / "small-f32.gguf", demo_gguf, shape=(256, 512, 4, 49152))
    return quantize_gguf(llama_tools, small, folder / "small-q4km.gguf", "Q4_K_M")


@pytest.fixture(scope="module")
def imported(q4km: Path) -> Path:
    return convert_gguf(q4km, q4km.parent / "imported").path


@pytest.fixture(scope="module")
def exact_logits(q4km: Path) -> np.ndarray:
    """The GGUF's own weights, dequantized exactly (the import's float32): the reference."""
    folder = convert_gguf(q4km, q4km.parent / "float32", weights="float32").path
    model, _, _ = q6k.load_model(folder)
    return np.array(model(IDS)[0])


def _loaded(folder: Path, native: bool):
    model, _, kept = q6k.load_model(folder, native=native)
    cpu.accelerate(model)
    return model, kept


def test_the_import_keeps_q6k_and_the_load_converts_it_on_request(imported: Path):
    model, kept = _loaded(imported, native=False)
    assert kept == q6k.Q6KLoad(layers=kept.layers, native=False) and kept.layers >= 5
    assert not any(isinstance(m, (Q6KLinear, Q6KEmbedding)) for _, m in model.named_modules())
    config = q6k.load_model(imported, native=False)[1]
    assert all(config["quantization"][p] == q6k.AFFINE8 for p in q6k.layers(_config(imported)))


def _config(folder: Path) -> dict:
    import json

    return json.loads((folder / "config.json").read_text())


def test_native_layers_compute_closer_to_the_gguf_than_8bit(imported: Path, exact_logits):
    converted = np.array(_loaded(imported, native=False)[0](IDS)[0])
    eight_bit = np.abs(converted - exact_logits).mean()
    if not VNNI:  # the kernels have no 6-bit path here: the engine converts (test below)
        assert "needs AVX-512 VNNI" in cpu.kernel_status().q6k
        assert eight_bit < 0.1 * np.abs(exact_logits).mean()
        return
    model, kept = _loaded(imported, native=True)
    layers = [m for _, m in model.named_modules() if isinstance(m, (Q6KLinear, Q6KEmbedding))]
    assert kept.native and len(layers) == kept.layers
    native = np.array(model(IDS)[0])
    six_bit = np.abs(native - exact_logits).mean()
    print(f"mean |logit - exact|: Q6_K as 6-bit {six_bit:.2e}, as 8-bit {eight_bit:.2e}")
    assert six_bit < 0.8 * eight_bit  # both share the 4-bit layers and the activations
    assert (native.argmax(-1) == exact_logits.argmax(-1)).mean() >= 0.99


def test_fused_layers_take_q6k_linears_bit_for_bit(imported: Path):
    """The fused decoder layer (one primitive for the attention and MLP) computes a layer with
    a Q6_K value or down projection as the per-op path does, prompt and decode step."""
    if not VNNI:  # no 6-bit layers here to fuse: the engine converts them at load
        assert "needs AVX-512 VNNI" in cpu.kernel_status().q6k
        return
    model, _ = _loaded(imported, native=True)
    with_q6k = [
        b for b in model.layers if any(isinstance(m, Q6KLinear) for _, m in b.named_modules())
    ]
    assert with_q6k and all(fused._parts(block) is not None for block in with_q6k)
    outputs = []
    for on in (True, False):
        fused.use_fused(on)
        cache = make_prompt_cache(model)
        prompt, step = model(IDS[:, :96], cache=cache), model(IDS[:, 96:97], cache=cache)
        outputs.append((np.array(prompt), np.array(step)))
    fused.use_fused(True)
    assert np.array_equal(outputs[0][0], outputs[1][0])
    assert np.array_equal(outputs[0][1], outputs[1][1])


def test_the_engine_says_what_q6k_became(engine: Engine, imported: Path):
    params = SamplingParams(temperature=0, max_tokens=8)
    for model_id, spec_format in (("q6k-auto", "auto"), ("q6k-f32", "float32")):
        spec = ModelSpec(model_id, str(imported), compute_format=spec_format)
        _, done = run_job(engine, spec, "Hello", params)
        assert done.completion_tokens > 0
    models = {m.id: m for m in engine.state.models}
    layers = len(q6k.layers(_config(imported)))
    if VNNI:
        assert (
            f"its {layers} Q6_K layers 6-bit in the CPU kernels" in models["q6k-auto"].format_reason
        )
    else:
        assert (
            "as MLX 8-bit (the kernels' 6-bit path needs AVX-512 VNNI"
            in models["q6k-auto"].format_reason
        )
    assert f"its {layers} Q6_K layers in float32" in models["q6k-f32"].format_reason
    # /health and admin's "computing in" say it too
    health = EngineHealth(engine.state, True, False, 0, None, queued=0, evictions=0)
    shown = health_document(health)["models"]
    assert shown["q6k-auto"]["q6_k"] == models["q6k-auto"].q6k
    assert models["q6k-auto"].q6k in models["q6k-auto"].format_reason
    mlx_only = Engine(EngineConfig(pool_budget_bytes=8 * 2**30, cpu_kernels=False))
    try:
        spec = ModelSpec("q6k-off", str(imported), compute_format="quantized")
        _, done = run_job(mlx_only, spec, "Hello", params)
        assert done.completion_tokens > 0
        reason = mlx_only.state.models[0].format_reason
        assert f"its {layers} Q6_K layers as MLX 8-bit (the CPU kernels are off" in reason
    finally:
        mlx_only.stop()
        cpu.configure()
    assert cpu.kernel_status().available
