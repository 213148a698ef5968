"""The supervisor: a dead or wedged engine is replaced, its requests end with a clean error,
pinned models come back."""

import time

import pytest

from inference.engine.config import EngineConfig
from inference.engine.supervisor import Supervisor
from inference.engine.types import Done, ErrorKind, Failed, ModelSpec, SamplingParams
from tests.support.helpers import collect, start_job

# The engine never imports Django: the PostgreSQL pass would only repeat these.
pytestmark = pytest.mark.database_independent

LONG = SamplingParams(temperature=0, max_tokens=100_000, logit_bias={2: -100.0})


@pytest.fixture
def supervisor():
    supervisor = Supervisor(EngineConfig(pool_budget_bytes=2**30), stall_timeout=1.0)
    yield supervisor
    supervisor.stop()


def wait_for(condition, timeout: float) -> float:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, "timed out"
        time.sleep(0.05)
    return time.monotonic() - started


def first_token(job) -> None:
    while True:
        event = job.events.get(timeout=60)
        if not hasattr(event, "prompt_tokens") or hasattr(event, "finish_reason"):
            return


def test_a_crashed_engine_is_replaced_and_its_requests_fail_cleanly(supervisor, tiny_dir):
    pinned = ModelSpec(model_id="tiny", location=str(tiny_dir), pinned=True)
    old = supervisor.engine
    old.call(lambda engine: engine.warm(pinned)).result(timeout=60)
    job = start_job(old, pinned, "Tell me a long story", LONG)
    first_token(job)
    old.request_crash()
    _, event = collect(job, timeout=10)
    assert isinstance(event, Failed)
    assert event.error.kind is ErrorKind.ENGINE_RESTARTED
    recovery = wait_for(lambda: supervisor.restarts == 1 and supervisor.ready, timeout=10)
    assert recovery < 10
    assert supervisor.engine is not old and not old.alive
    assert "died" in supervisor.last_failure
    assert supervisor.engine.pool.loaded_ids() == ["tiny"]  # the pinned model came back
    _, done = collect(start_job(supervisor.engine, pinned, "Hi"))
    assert isinstance(done, Done)


def test_a_wedged_engine_is_replaced(supervisor, tiny_dir):
    spec = ModelSpec(model_id="tiny", location=str(tiny_dir))
    old = supervisor.engine
    job = start_job(old, spec, "Tell me a long story", LONG)
    first_token(job)
    old.call(lambda engine: time.sleep(4))  # a step that never seems to end
    _, event = collect(job, timeout=10)
    assert isinstance(event, Failed) and event.error.kind is ErrorKind.ENGINE_RESTARTED
    wait_for(lambda: supervisor.restarts == 1 and supervisor.ready, timeout=10)
    assert "no progress" in supervisor.last_failure
    assert supervisor.engine.pool.loaded_ids() == []  # not pinned: loaded again on demand
    _, done = collect(start_job(supervisor.engine, spec, "Hi"))
    assert isinstance(done, Done)
    # The old thread wakes up later, sees it was abandoned, and exits without a word.
    wait_for(lambda: not old._thread.is_alive(), timeout=10)
    assert job.events.empty()


def test_a_long_load_is_not_a_wedge(supervisor, tiny_dir, monkeypatch):
    from inference.engine import pool as pool_module

    real_load = pool_module.load_weights

    def slow_load(*args, **kwargs):
        time.sleep(2.5)  # longer than the 1 s stall timeout
        return real_load(*args, **kwargs)

    monkeypatch.setattr(pool_module, "load_weights", slow_load)
    spec = ModelSpec(model_id="tiny", location=str(tiny_dir))
    _, done = collect(start_job(supervisor.engine, spec, "Hi"))
    assert isinstance(done, Done)
    assert supervisor.restarts == 0


def test_an_idle_engine_is_not_a_wedge(supervisor):
    time.sleep(1.5)
    assert supervisor.restarts == 0 and supervisor.ready
