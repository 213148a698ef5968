"""The prefix cache's disk tier beside a live engine: its writer waits while the engine
computes, from a request's first step on, and runs only on a core nothing else wants."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from inference.engine import prefix_disk
from inference.engine.batching import ModelRunner
from inference.engine.config import EngineConfig
from inference.engine.types import Done, SamplingParams
from inference.engine.worker import Engine
from tests.engine.test_prefix_disk import KEY, kv_cache
from tests.support.helpers import collect, start_job


@pytest.fixture
def disk_engine(tmp_path):
    config = EngineConfig(
        pool_budget_bytes=8 * 2**30,
        prefix_cache_dir=str(tmp_path / "prefixes"),
        prefix_cache_disk_min_tokens=8,
    )
    engine = Engine(config)
    yield engine
    engine.stop()
    prefix_disk.shared(config).close()


def test_every_step_runs_while_the_writer_is_told_to_wait(disk_engine, tiny_spec, monkeypatch):
    """A request that reached an idle engine (an agent's next turn, read in one step) was
    read while the writer, last told the engine was idle, wrote the previous turn's file
    beside it (seen with py-spy: the writer in write() through a whole next turn)."""
    disk = prefix_disk.shared(disk_engine.config)
    told_busy: list[bool] = []
    step = ModelRunner.step

    def watched(runner):
        told_busy.append(not disk._idle.is_set())
        return step(runner)

    monkeypatch.setattr(ModelRunner, "step", watched)
    for prompt in ("Hello there, how are you today?", "And once more, how are you?"):
        job = start_job(disk_engine, tiny_spec, prompt, SamplingParams(temperature=0, max_tokens=3))
        assert isinstance(collect(job)[1], Done)
    assert told_busy and all(told_busy), told_busy
    assert disk.flush(timeout=30)  # idle again: the prompts' files get written
    assert disk.state().writes >= 1


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own scheduling policy is Linux's")
def test_the_writer_runs_at_idle_priority(tmp_path, monkeypatch):
    """At a nice value the writer still took slices from the kernels' threads, which wait
    for each other: SCHED_IDLE runs it only on a core nothing else wants."""
    store = prefix_disk.PrefixDisk(tmp_path, 2**30, min_tokens=1)
    policies: list[int] = []
    original = prefix_disk.PrefixDisk._write

    def noted(self, name, prepared):
        policies.append(os.sched_getscheduler(threading.get_native_id()))
        return original(self, name, prepared)

    monkeypatch.setattr(prefix_disk.PrefixDisk, "_write", noted)
    assert store.offer(KEY, list(range(20)), kv_cache(20))
    assert store.flush(timeout=30)
    store.close()
    assert policies == [os.SCHED_IDLE]
