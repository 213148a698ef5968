"""Batch-priority work on a real engine: interactive requests start at once beside it and
answer as they would alone; batch prompts being read make way; the queues are apart."""

import queue
from dataclasses import replace

import pytest

from inference.adapters import FamilyProfile, get_adapter
from inference.engine.admission import Admission
from inference.engine.config import EngineConfig
from inference.engine.handle import overloaded
from inference.engine.prefill import PrefillBatch
from inference.engine.state import EngineHealth
from inference.engine.types import (
    BATCH,
    Delta,
    Done,
    EmbeddingJob,
    GenerationJob,
    ModelSpec,
    SamplingParams,
    Started,
)
from inference.engine.worker import Engine
from inference.observability.metrics import EngineCollector
from inference.serving.prompts import TextPrompt
from tests.support.helpers import collect, prepared_job, wait_until

pytestmark = pytest.mark.database_independent

NO_EOS = {2: -100.0}  # SmolLM2's end token, banned: every answer runs to max_tokens


@pytest.fixture(scope="module")
def long_spec(tiny_spec):
    return replace(tiny_spec, model_id="tiny-priority", context_length=8192)


@pytest.fixture(scope="module")
def engine():
    # 8 slots: batch work alone holds at most 4, beside interactive work 2.
    config = EngineConfig(
        pool_budget_bytes=8 * 2**30,
        max_batch=8,
        prefill_step=64,
        prompt_cache_bytes=0,
        batch_share=0.5,
        batch_beside=2,
    )
    engine = Engine(config)
    yield engine
    engine.stop()


def job(spec, text: str, max_tokens: int, priority: str = "interactive") -> GenerationJob:
    events: queue.SimpleQueue = queue.SimpleQueue()
    params = SamplingParams(temperature=0, max_tokens=max_tokens, logit_bias=NO_EOS)
    made = prepared_job(spec, get_adapter(FamilyProfile()), TextPrompt(text), params, events.put)
    made.events = events  # type: ignore[attr-defined]
    made.priority = priority
    made.group = str(id(made))  # a request each, as the Batch API's lines are
    return made


def drain(jobs: list[GenerationJob]) -> int:
    """Deltas the jobs have delivered since the last look."""
    count = 0
    for j in jobs:
        while not j.events.empty():
            count += isinstance(j.events.get_nowait(), Delta)
    return count


def batch_rows(engine: Engine) -> tuple[int, int]:
    model = engine.state.models[0]
    return model.batch_active_sequences, model.batch_queued_sequences


def gauges(engine: Engine) -> dict[str, float]:
    """/metrics' engine gauges over this engine's snapshot."""
    health = EngineHealth(engine.state, True, False, 0, None, queued=0, evictions=0)
    families = EngineCollector(lambda: health).collect()
    return {f.name: f.samples[0].value for f in families if len(f.samples) == 1}


def test_an_interactive_request_starts_at_once_beside_a_full_batch_and_answers_as_alone(
    engine, long_spec
):
    alone = job(long_spec, " the river runs", 12)
    engine.submit(alone)
    expected, _ = collect(alone)
    work = [job(long_spec, f" line {i} of the batch", 2000, BATCH) for i in range(6)]
    engine.submit(*work)
    # Alone, batch work takes half the slots; the rest of it waits.
    assert wait_until(lambda: batch_rows(engine) == (4, 2), 30)
    assert gauges(engine)["inference_batch_requests_running"] == 4  # /metrics counts them apart
    assert isinstance(work[0].events.get(timeout=30), Started)
    assert isinstance(work[0].events.get(timeout=30), Delta)  # decoding
    chat = job(long_spec, " the river runs", 12)
    drain(work)
    engine.submit(chat)
    assert isinstance(chat.events.get(timeout=30), Started)
    assert isinstance(first := chat.events.get(timeout=30), Delta)
    meanwhile = drain(work)  # batch tokens decoded between the chat's arrival and its first
    assert meanwhile <= 4 * 4, meanwhile  # a few steps of the four batch rows at most
    text, done = collect(chat)
    assert isinstance(done, Done) and first.text + text == expected
    # Decoding batch rows were not interrupted, and none joined beside the chat.
    assert batch_rows(engine) == (4, 2)
    for j in work:
        j.cancelled.set()
    assert wait_until(lambda: engine.state.running == 0, 10)


def test_a_batch_prompt_being_read_is_set_aside_for_an_interactive_one(
    engine, long_spec, monkeypatch
):
    set_aside = []
    original = PrefillBatch.set_aside

    def counted(self, index):
        set_aside.append(self.rows[index].job.priority)
        return original(self, index)

    monkeypatch.setattr(PrefillBatch, "set_aside", counted)
    reader = job(long_spec, " word" * 6000, 4, BATCH)  # ~94 steps of 64 tokens
    chat = job(long_spec, " the river runs", 8)
    engine.submit(reader)
    assert isinstance(reader.events.get(timeout=30), Started)
    assert wait_until(lambda: batch_rows(engine) == (1, 0), 10)  # being read
    engine.submit(chat)
    _, done = collect(chat)
    assert isinstance(done, Done) and done.completion_tokens == 8
    assert reader.events.empty()  # its prompt was still unread: no token yet
    assert set_aside == [BATCH]  # made way while the chat's prompt was read (room or not)
    _, done = collect(reader)
    assert isinstance(done, Done) and done.completion_tokens == 4  # resumed where it stopped


def test_batch_work_queues_apart_and_its_429_says_so():
    admission = Admission(max_queued=2, max_queued_batch=1)
    assert admission.try_admit(1, decoding=0, priority=BATCH) is None
    assert admission.try_admit(1, decoding=0, priority=BATCH) is not None  # its queue is full
    assert admission.try_admit(2, decoding=0) is None  # interactive requests still get theirs
    assert admission.live == 3 and admission.queued(0, BATCH) == 1
    admission.finish(1, BATCH)
    assert admission.try_admit(1, decoding=0, priority=BATCH) is None
    message = overloaded(1, 3.0, BATCH).message
    assert "batch-priority queue is full" in message and "retry in 3 s" in message
    with pytest.raises(ValueError, match="priority 'bulk'"):
        admission.try_admit(1, decoding=0, priority="bulk")


def test_an_interactive_embedding_runs_before_batch_rows_waiting(engine, encoder_embedder_dir):
    spec = ModelSpec("bert-priority", str(encoder_embedder_dir), purpose="embedding")
    engine.call(lambda e: e.warm(spec)).result(timeout=60)
    answers: queue.SimpleQueue = queue.SimpleQueue()
    inputs = ["the quick brown fox jumps over the lazy dog"] * 40  # 5 rows a 64-token batch
    bulk = EmbeddingJob(spec, inputs, lambda e: answers.put(("batch", e)), priority=BATCH)
    chat = EmbeddingJob(spec, ["a question", "another"], lambda e: answers.put(("chat", e)))
    engine.submit(bulk)
    engine.submit(chat)
    first, second = answers.get(timeout=60), answers.get(timeout=60)
    assert [first[0], second[0]] == ["chat", "batch"]
    assert len(second[1].vectors) == 40 and len(first[1].vectors) == 2
