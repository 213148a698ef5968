"""The engine thread with real models: SmolLM2 for quality, a tiny random model for mechanics."""

import queue
import shutil

import pytest

from inference.adapters import FamilyProfile, get_adapter
from inference.engine.pool import ModelPool
from inference.engine.types import (
    Delta,
    Done,
    EngineError,
    ErrorKind,
    Failed,
    ModelSpec,
    SamplingParams,
    Started,
)
from inference.serving.prompts import ChatPrompt
from tests.support.helpers import prepared_job, run_job, start_job, wait_until

# The engine never imports Django: the PostgreSQL pass would only repeat these.
pytestmark = pytest.mark.database_independent

HELLO = 19556  # "Hello" in SmolLM2's vocabulary
EOS = 2
NO_EOS = {EOS: -100.0}


def test_smollm2_answers_paris_and_stops_on_its_own(engine, smollm_spec):
    text, done = run_job(
        engine,
        smollm_spec,
        "What is the capital of France?",
        SamplingParams(temperature=0, max_tokens=64),
    )
    assert "Paris" in text
    assert isinstance(done, Done)
    assert done.finish_reason == "stop"
    assert done.completion_tokens < 64
    assert "<|im_end|>" not in text


def test_greedy_is_deterministic(engine, smollm_spec):
    params = SamplingParams(temperature=0, max_tokens=24)
    first_text, first = run_job(engine, smollm_spec, "Name a colour.", params)
    second_text, second = run_job(engine, smollm_spec, "Name a colour.", params)
    assert first_text == second_text
    assert first.completion_tokens == second.completion_tokens
    # The second run reused the first one's prompt KV (all but the token it must feed).
    assert second.cached_tokens == second.prompt_tokens - 1


def test_second_turn_prefills_only_new_tokens(engine, smollm_spec):
    turn = [{"role": "user", "content": "Tell me about Paris in one sentence."}]
    params = SamplingParams(temperature=0, max_tokens=32)
    reply, first = run_job(engine, smollm_spec, turn, params)
    turn += [
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "And about Rome?"},
    ]
    _, second = run_job(engine, smollm_spec, turn, params)
    assert second.cached_tokens >= first.prompt_tokens
    assert second.prompt_tokens - second.cached_tokens < 20


def test_max_tokens_ends_with_length(engine, tiny_spec):
    text, done = run_job(
        engine, tiny_spec, params=SamplingParams(temperature=0, max_tokens=5, logit_bias=NO_EOS)
    )
    assert isinstance(done, Done)
    assert (done.finish_reason, done.completion_tokens) == ("length", 5)
    assert done.prompt_tokens > 5
    assert text


def test_stop_string_split_across_tokens(engine, tiny_spec):
    params = SamplingParams(temperature=0, max_tokens=20, logit_bias={HELLO: 100.0}, stop=("loHe",))
    text, done = run_job(engine, tiny_spec, params=params)
    assert text == "Hel"
    assert done.finish_reason == "stop"


def test_family_stop_token_is_never_emitted(engine, tiny_spec):
    adapter = get_adapter(FamilyProfile(adapter="chatml", extra_stop_tokens=("Hello",)))
    params = SamplingParams(temperature=0, max_tokens=20, logit_bias={HELLO: 100.0})
    text, done = run_job(engine, tiny_spec, params=params, adapter=adapter)
    assert text == ""
    assert (done.finish_reason, done.completion_tokens) == ("stop", 1)


def test_seed_reproduces_sampling(engine, tiny_spec):
    def sample(seed):
        params = SamplingParams(temperature=1.0, seed=seed, max_tokens=12, logit_bias=NO_EOS)
        return run_job(engine, tiny_spec, params=params)[0]

    assert sample(42) == sample(42)
    assert sample(42) != sample(43)


def test_requests_interleave_instead_of_queueing(engine, tiny_spec):
    timeline: queue.SimpleQueue = queue.SimpleQueue()
    params = SamplingParams(temperature=0, max_tokens=30, logit_bias=NO_EOS)
    adapter = get_adapter(FamilyProfile())
    for name in ("a", "b"):
        job = prepared_job(
            tiny_spec,
            adapter,
            ChatPrompt([{"role": "user", "content": f"Hi {name}"}]),
            params,
            lambda event, name=name: timeline.put((name, event)),
        )
        engine.submit(job)
    order, finished = [], 0
    while finished < 2:
        name, event = timeline.get(timeout=60)
        order.append((name, type(event).__name__))
        finished += isinstance(event, Done | Failed)
    assert order.index(("b", "Delta")) < order.index(("a", "Done"))


def test_cancelled_job_leaves_the_engine_at_once(engine, tiny_spec):
    params = SamplingParams(temperature=0, max_tokens=400, logit_bias=NO_EOS)
    job = start_job(engine, tiny_spec, params=params)
    assert isinstance(job.events.get(timeout=60), Started)
    assert isinstance(job.events.get(timeout=60), Delta)
    job.cancelled.set()
    assert wait_until(lambda: engine.state.running == 0, 1.0)
    # And the engine still serves.
    assert isinstance(run_job(engine, tiny_spec)[1], Done)


def failure(engine, spec, **params):
    _text, event = run_job(engine, spec, "x " * 40, SamplingParams(temperature=0, **params))
    assert isinstance(event, Failed)
    return event.error


def test_prompt_longer_than_context(engine, tiny_dir):
    spec = ModelSpec(model_id="tiny-short", location=str(tiny_dir), context_length=16)
    error = failure(engine, spec)
    assert error.kind is ErrorKind.CONTEXT_LENGTH_EXCEEDED
    assert "maximum context length is 16" in error.message


def test_logit_bias_outside_vocabulary(engine, tiny_spec):
    error = failure(engine, tiny_spec, logit_bias={10**9: 1.0})
    assert (error.kind, error.param) == (ErrorKind.INVALID_REQUEST, "logit_bias")


def test_missing_weights_never_reach_the_hub(engine, tmp_path):
    # A deleted folder, and a directory that is not a model, are refused the same way: when
    # serving reads the tokenizer to prepare a prompt, and when the engine loads the weights.
    for spec in (ModelSpec("gone", str(tmp_path / "deleted")), ModelSpec("empty", str(tmp_path))):
        with pytest.raises(EngineError) as preparing:
            run_job(engine, spec)
        assert preparing.value.kind is ErrorKind.MODEL_UNAVAILABLE
        with pytest.raises(EngineError) as loading:
            engine.call(lambda engine, spec=spec: engine.warm(spec)).result(timeout=60)
        assert loading.value.kind is ErrorKind.MODEL_UNAVAILABLE


def test_pool_evicts_least_recently_used(tiny_dir, tmp_path):
    copies = []
    for name in ("a", "b", "c"):
        shutil.copytree(tiny_dir, tmp_path / name)
        copies.append(ModelSpec(model_id=name, location=str(tmp_path / name)))
    size = sum(f.stat().st_size for f in tiny_dir.glob("*.safetensors"))
    pool = ModelPool(budget_bytes=int(size * 2.5))
    pool.get(copies[0])
    pool.get(copies[1])
    pool.get(copies[0])  # b is now the least recently used
    pool.get(copies[2])
    assert [m.spec.model_id for m in pool.loaded()] == ["a", "c"]
    with pytest.raises(Exception, match="more than the pool's budget"):
        ModelPool(budget_bytes=size // 2).get(copies[0])
