"""The compute-format policy: on a Linux CPU the stored weights through the CPU kernels or
float32 through OpenBLAS, whichever measures faster; the same greedy outputs either way."""

import pytest
from mlx_lm import load

from inference import blas
from inference.engine import compute_format, cpu
from inference.engine.compute_format import MEASURE, FormatChoice, choose, float32_bytes
from inference.engine.config import EngineConfig
from inference.engine.format_verdicts import weights_key
from inference.engine.types import ModelSpec, SamplingParams
from inference.engine.worker import Engine
from tests.support.helpers import quantize_model_dir, run_job

# The engine never imports Django: the PostgreSQL pass would only repeat these.
pytestmark = pytest.mark.database_independent

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
    assert cpu.kernel_status().available  # kernels/ builds on every machine we test on
    assert choose("quantized", smol, 2**40) == FormatChoice(
        "stored", "the catalog asks for the stored weights", kernels=True
    )
    assert choose("float16", smol, 2**40) == FormatChoice("float16", "the catalog asks for it")
    assert choose("float32", smol, 2**40).kernels
    assert choose("auto", smol, 2**40) == FormatChoice(
        MEASURE, "timed at load unless the kernels take every layer", kernels=True
    )
    tight = choose("auto", smol, 100 * 2**20)
    assert (tight.format, tight.kernels) == ("stored", True)
    assert "more than the 100 MiB left" in tight.reason
    monkeypatch.setattr(blas, "_status", blas.BlasStatus(None, "disabled by BLAS_PRELOAD=false"))
    assert choose("auto", smol, 2**40) == FormatChoice(
        "stored", "no optimized BLAS (disabled by BLAS_PRELOAD=false)", kernels=True
    )


def test_policy_without_the_kernels(smol, monkeypatch):
    off = cpu.KernelStatus(False, None, 0, "not built")
    monkeypatch.setattr(compute_format.cpu, "kernel_status", lambda: off)
    assert choose("quantized", smol, 2**40).kernels is False
    if blas.status().library:
        assert choose("auto", smol, 2**40) == FormatChoice(
            "float32", "CPU backend with an optimized BLAS, and it fits"
        )


def _no_timing(*args: object) -> None:
    raise AssertionError("timed")


def test_auto_keeps_the_stored_weights_untimed_when_the_kernels_take_every_layer(
    smollm_dir, monkeypatch
):
    """The demo model's layers are all 4-bit affine, which the kernels read: stored, at once."""
    monkeypatch.setattr(compute_format, "measure", _no_timing)
    model, choice = compute_format.prepare("auto", load(str(smollm_dir))[0], 2**40, key="demo")
    assert choice == FormatChoice(
        "stored", compute_format.ALL_IN_KERNELS, kernels=True, activations="15bit"
    )
    assert any(isinstance(m, cpu.QuantizedKernelLayer) for _, m in model.named_modules())
    assert not cpu.on_mlx_path(model)


def test_auto_times_what_the_kernels_leave_and_a_restart_keeps_the_verdict(
    tiny_dir, tmp_path, monkeypatch
):
    """3-bit layers stay on MLX's quantized path: both formats are timed and the reason says
    what was measured. A later start (a new engine reading the same file) loads with that
    verdict at once."""
    folder = quantize_model_dir(tiny_dir, tmp_path / "tiny-3bit", bits=3)
    verdicts, key = tmp_path / "compute-formats.json", weights_key(str(folder))
    compute_format.keep_verdicts(str(verdicts))
    try:
        _, choice = compute_format.prepare("auto", load(str(folder))[0], 2**40, key=key)
        assert choice.format in ("stored", "float32") and choice.kernels
        left, measured = choice.reason.split("; ", 1)
        assert left.endswith(" QuantizedLinear on MLX's quantized path"), choice.reason
        assert measured.startswith("decode steps at batch 1/8 measured "), choice.reason
        assert "layers in float32" in choice.reason

        compute_format.keep_verdicts(str(verdicts))  # as the next start's engine does
        monkeypatch.setattr(compute_format, "measure", _no_timing)
        _, again = compute_format.prepare("auto", load(str(folder))[0], 2**40, key=key)
        assert (again.format, again.kernels) == (choice.format, True)
        assert again.reason.startswith("as measured at a load on ")
        assert again.reason.endswith(choice.reason)
    finally:
        compute_format.keep_verdicts("")


def test_the_kernels_answer_like_mlx_itself(engine, smollm_dir):
    """Greedy text of the demo model through the kernels (float32 activations) equals MLX's
    own path on the stored weights (float16 activations), that of a machine where kernels/
    did not build. The kernels' switch is the process's, so the runs take turns."""
    params = SamplingParams(temperature=0, max_tokens=32)
    specs = [
        ModelSpec(f"smol-q{i}", str(smollm_dir), compute_format="quantized")
        for i in range(len(PROMPTS))
    ]
    ours = [run_job(engine, s, p, params)[0] for s, p in zip(specs, PROMPTS, strict=True)]
    assert all(m.kernels for m in engine.state.models if m.id.startswith("smol-q"))
    mlx_only = Engine(EngineConfig(pool_budget_bytes=8 * 2**30, cpu_kernels=False))
    try:
        theirs = [run_job(mlx_only, s, p, params)[0] for s, p in zip(specs, PROMPTS, strict=True)]
        assert not any(m.kernels for m in mlx_only.state.models)
        assert mlx_only.state.kernels == "off: turned off by CPU_KERNELS=false"
    finally:
        mlx_only.stop()
        cpu.configure()
    assert cpu.kernel_status().available
    assert ours == theirs


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


def test_8bit_activations_load_round_and_show(engine, smollm_dir):
    """The catalog's 8bit activations: auto keeps the stored weights (the rounding happens on
    the kernels' integer path), every kernel layer rounds to one byte, and the engine's state
    (/health, the dashboard, admin) says so; 15bit models say theirs."""
    params = SamplingParams(temperature=0, max_tokens=16)
    eight = ModelSpec("smol-8bit-act", str(smollm_dir), activations="8bit")
    text, done = run_job(engine, eight, PROMPTS[0], params)
    assert text and done.completion_tokens > 0
    run_job(engine, ModelSpec("smol-15bit-act", str(smollm_dir), compute_format="quantized"))
    models = {m.id: m for m in engine.state.models}
    assert (models["smol-8bit-act"].compute_format, models["smol-8bit-act"].kernels) == (
        "stored",
        True,
    )
    assert models["smol-8bit-act"].activations == "8bit"
    assert "8bit activations" in models["smol-8bit-act"].format_reason
    assert models["smol-15bit-act"].activations == "15bit"


def test_8bit_activations_are_refused_where_they_cannot_apply(engine, smollm_dir):
    params = SamplingParams(temperature=0, max_tokens=4)
    spec = ModelSpec("smol-f32-8bit", str(smollm_dir), compute_format="float32", activations="8bit")
    _, failed = run_job(engine, spec, PROMPTS[0], params)
    message = failed.error.message
    assert "8bit activations apply to the CPU kernels' direct integer path" in message
    assert "computes in float32" in message
    mlx_only = Engine(EngineConfig(pool_budget_bytes=8 * 2**30, cpu_kernels=False))
    try:
        spec = ModelSpec("smol-off-8bit", str(smollm_dir), activations="8bit")
        _, failed = run_job(mlx_only, spec, PROMPTS[0], params)
        assert "the CPU kernels are off (turned off by CPU_KERNELS=false)" in failed.error.message
        assert not mlx_only.state.models
    finally:
        mlx_only.stop()
        cpu.configure()
    assert cpu.kernel_status().available
