"""Models read on the loader thread (engine/loading.py): a model being read never stops the
streams of the models already loaded, and what waits for it starts once it is read."""

import itertools
import shutil
import threading
import time

import pytest

from inference.engine.pool import Loading
from inference.engine.types import (
    Delta,
    Done,
    EngineError,
    ErrorKind,
    Failed,
    GenerationJob,
    ModelSpec,
    SamplingParams,
    TokenPrompt,
)
from tests.support.helpers import collect, run_job, start_job

# The engine never imports Django: the PostgreSQL pass would only repeat these.
pytestmark = pytest.mark.database_independent

NO_EOS = {2: -100.0}
READ_SECONDS = 3.0


def slow_reads(monkeypatch, model_id: str) -> dict:
    """`model_id`'s read takes READ_SECONDS longer, as a large model's would from disk: the
    real read after a sleep, noting the thread it ran on and when."""
    seen: dict = {}
    real = Loading.read

    def read(self):
        if self.spec.model_id == model_id:
            seen["thread"] = threading.current_thread().name
            seen["started"] = time.monotonic()
            time.sleep(READ_SECONDS)
            seen["ended"] = time.monotonic()
        return real(self)

    monkeypatch.setattr(Loading, "read", read)
    return seen


def test_streams_go_on_while_another_model_is_read(
    engine, tiny_spec, tiny_dir, tmp_path, monkeypatch
):
    slow = ModelSpec("slow", str(shutil.copytree(tiny_dir, tmp_path / "slow")))
    seen = slow_reads(monkeypatch, "slow")
    # Loaded before; a context long enough to stream through the whole read.
    running = ModelSpec("tiny-long", tiny_spec.location, context_length=50_000)
    run_job(engine, running, "Hi")
    params = SamplingParams(temperature=0, max_tokens=40_000, logit_bias=NO_EOS)
    streaming = start_job(engine, running, "Hi", params)
    waiting = start_job(engine, slow, "Hi", SamplingParams(temperature=0, max_tokens=4))
    times = []
    while "ended" not in seen or times[-1] < seen["ended"]:
        event = streaming.events.get(timeout=60)
        assert not isinstance(event, Failed | Done), event
        if isinstance(event, Delta):
            times.append(time.monotonic())
    streaming.cancelled.set()
    during = [t for t in times if seen["started"] <= t <= seen["ended"]]
    gaps = [b - a for a, b in itertools.pairwise(during)]
    assert seen["thread"].startswith("mlx-loader")
    assert len(during) > 20 and max(gaps) < 1.0, (len(during), max(gaps, default=None))
    _, done = collect(waiting)
    assert isinstance(done, Done) and done.completion_tokens == 4


def test_a_warm_answers_once_the_model_is_read(engine, tiny_dir, tmp_path, monkeypatch):
    slow = ModelSpec("slow-warm", str(shutil.copytree(tiny_dir, tmp_path / "slow")))
    seen = slow_reads(monkeypatch, "slow-warm")
    answer = engine.call(lambda engine: engine.warm(slow)).result(timeout=60)
    assert answer["id"] == "slow-warm" and not answer["already_loaded"]
    assert answer["load_seconds"] >= READ_SECONDS and seen["thread"].startswith("mlx-loader")
    again = engine.call(lambda engine: engine.warm(slow)).result(timeout=60)
    assert again["already_loaded"] and again["load_seconds"] == 0.0


def test_jobs_waiting_for_a_model_that_cannot_be_read_fail_with_its_refusal(engine, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "nothing-we-know"}')
    spec = ModelSpec("broken", str(broken))
    events = []
    engine.submit(GenerationJob(spec, TokenPrompt((1, 2, 3)), SamplingParams(), events.append))
    assert _wait(lambda: events)
    assert isinstance(events[0], Failed)
    assert events[0].error.kind is ErrorKind.MODEL_UNAVAILABLE
    assert "could not be loaded" in events[0].error.message
    assert isinstance(events[0].error, EngineError)


def test_a_load_reads_the_tokenizer_once_and_the_engine_computes_with_its_own_copy(
    tiny_dir, tmp_path, monkeypatch
):
    """Serving reads a model's tokenizer for its first request, then the engine loads the
    model: the engine's instance is a copy (a Hugging Face tokenizer cannot be shared across
    threads), not a second read of the files (the first request waited for both)."""
    import mlx_lm.utils

    from inference.engine import loaders, vocabulary

    reads = []
    real = mlx_lm.utils.load_tokenizer
    monkeypatch.setattr(
        mlx_lm.utils, "load_tokenizer", lambda *a, **k: reads.append(a) or real(*a, **k)
    )
    spec = ModelSpec("copied", str(shutil.copytree(tiny_dir, tmp_path / "copied")))
    served = vocabulary.vocabularies.get(spec).tokenizer
    _, engines, _, _ = loaders.load_weights(spec)
    assert len(reads) == 1
    assert engines is not served and engines._tokenizer is not served._tokenizer
    text = "Hello there, how are you?"
    assert engines.encode(text) == served.encode(text) and engines.eos_token_ids
    assert engines.eos_token_ids == served.eos_token_ids


def _wait(condition, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}


@pytest.fixture(scope="module")
def llama3_dir(smollm_dir, tmp_path_factory):
    """A 4-bit Llama 3.x (rope scaling: its RoPE computes `_freqs`, an array that is no
    parameter, when the model is made)."""
    from tests.support.helpers import build_tiny_model, quantize_model_dir

    root = tmp_path_factory.mktemp("llama3")
    dense = build_tiny_model(smollm_dir, root / "dense", head_dim=64, rope_scaling=LLAMA3_ROPE)
    return quantize_model_dir(dense, root / "q4")


@pytest.mark.parametrize("compute_format", ["auto", "quantized", "float32"])
def test_a_model_with_arrays_beyond_its_parameters_answers_after_every_load(
    engine, llama3_dir, compute_format
):
    # Read on the loader thread, whose stream is gone once it ends: every array the model
    # holds (its RoPE's `_freqs` too) must be computed there, on the first load, after an
    # unload, and whether the compute format is timed (auto) or set.
    spec = ModelSpec("llama3", str(llama3_dir), compute_format=compute_format)
    params = SamplingParams(temperature=0, max_tokens=6, logit_bias=NO_EOS)
    first, done = collect(start_job(engine, spec, "Hi there", params))
    assert isinstance(done, Done), done
    engine.call(lambda engine: engine.unload("llama3")).result(timeout=60)
    again, done = collect(start_job(engine, spec, "Hi there", params))
    assert isinstance(done, Done), done
    assert again == first and again
