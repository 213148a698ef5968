"""Fair shares, paced prompt reading, bounded cancellation, greedy outputs as mlx-lm's."""

import queue
import re
from dataclasses import replace
from types import SimpleNamespace

import pytest
from mlx_lm import stream_generate
from mlx_lm.sample_utils import make_sampler

from inference.adapters import FamilyProfile, get_adapter
from inference.engine.config import EngineConfig
from inference.engine.pool import ModelPool
from inference.engine.prefill import PrefillBatch
from inference.engine.scheduling import (
    BATCH_PREFILL_SHARE,
    BatchLimits,
    PrefillPacer,
    admit,
    preemptible,
    starved,
    to_set_aside,
    used,
)
from inference.engine.types import (
    BATCH,
    INTERACTIVE,
    Delta,
    Done,
    Failed,
    GenerationJob,
    SamplingParams,
    Started,
)
from inference.engine.worker import Engine
from inference.runtime import get_supervisor
from inference.serving.prompts import TextPrompt
from tests.support.helpers import assert_error, collect, prepared_job, start_job, wait_until

# The engine never imports Django: the PostgreSQL pass would only repeat these.
pytestmark = pytest.mark.database_independent

NO_EOS = {2: -100.0}  # the end token of SmolLM2's vocabulary, banned


def seq(
    owner: str, group: str, prompt_tokens: int = 30, priority: str = INTERACTIVE
) -> SimpleNamespace:
    return SimpleNamespace(
        job=SimpleNamespace(owner=owner, group=group, priority=priority),
        prompt=[0] * prompt_tokens,
    )


def batch(group: str, owner: str = "k", prompt_tokens: int = 30) -> SimpleNamespace:
    return seq(owner, group, prompt_tokens, priority=BATCH)


def test_a_newcomer_gets_the_next_slot_before_a_request_holding_the_batch():
    running = [seq("k", "big") for _ in range(7)]
    waiting = [seq("k", "big") for _ in range(20)] + [seq("k", "small")]
    assert admit(waiting, running, free=1) == [waiting[-1]]


def test_a_request_alone_may_fill_the_batch():
    waiting = [seq("k", "big") for _ in range(40)]
    assert len(admit(waiting, [], free=32)) == 32


def test_slots_are_shared_between_keys_first_then_their_requests():
    waiting = [seq("a", f"a{i}") for i in range(3) for _ in range(10)]
    waiting += [seq("b", "b0") for _ in range(10)]
    chosen = admit(waiting, [], free=8)
    owners = [s.job.owner for s in chosen]
    assert owners.count("b") == 4  # half the batch for key b's one request
    assert sorted({s.job.group for s in chosen if s.job.owner == "a"}) == ["a0", "a1", "a2"]


def test_prefill_is_paced_to_a_share_of_the_decode_step():
    pacer = PrefillPacer(prefill_share=0.5)
    pacer.read(tokens=1000, seconds=2.0)  # 500 tokens/s
    pacer.decoded(0.2)
    assert pacer.budget(decoding=True, ceiling=4096) == 100  # 0.2 s of reading
    assert pacer.budget(decoding=False, ceiling=4096) == 256  # an idle step: 0.5 s, 256 at least
    assert pacer.budget(decoding=False, ceiling=64) == 64
    pacer.read(tokens=10_000, seconds=2.0)  # a fast model: 0.5 s is more than 256 tokens
    assert pacer.budget(decoding=False, ceiling=4096) == int(0.5 * pacer.tokens_per_second)


def test_an_idle_step_of_a_slow_model_still_reads_a_chunk_worth_its_fixed_costs():
    """A 1-2B model on two cores reads 30-60 tokens a second: paced by 0.5 s alone its steps
    took 16-30 tokens and measured their own (slower) speed at that size."""
    pacer = PrefillPacer(prefill_share=0.5)
    pacer.read(tokens=16, seconds=0.8)  # 20 tokens/s, measured on a small chunk
    assert pacer.budget(decoding=False, ceiling=2048) == 256
    pacer.decoded(0.1)
    assert pacer.budget(decoding=True, ceiling=2048) == 16  # beside streams: their cadence first


@pytest.fixture
def long_spec(tiny_spec):
    """The tiny model with room for long prompts (its rotary embedding has no hard limit)."""
    return replace(tiny_spec, model_id="tiny-long", context_length=8192)


@pytest.fixture
def paced_engine():
    config = EngineConfig(pool_budget_bytes=8 * 2**30, prefill_step=64, prompt_cache_bytes=0)
    engine = Engine(config)
    yield engine
    engine.stop()


def long_job(spec, tokens: int, max_tokens: int = 4, word: str = " hello") -> GenerationJob:
    events: queue.SimpleQueue = queue.SimpleQueue()
    params = SamplingParams(temperature=0, max_tokens=max_tokens, logit_bias=NO_EOS)
    prompt = TextPrompt(word * tokens)
    job = prepared_job(spec, get_adapter(FamilyProfile()), prompt, params, events.put)
    job.events = events  # type: ignore[attr-defined]
    return job


def test_streams_keep_flowing_while_a_long_prompt_is_read(paced_engine, long_spec):
    streaming = start_job(
        paced_engine,
        long_spec,
        params=SamplingParams(temperature=0, max_tokens=200, logit_bias=NO_EOS),
    )
    assert isinstance(streaming.events.get(timeout=60), Started)
    assert isinstance(streaming.events.get(timeout=60), Delta)
    reader = long_job(long_spec, 1500)
    paced_engine.submit(reader)
    assert isinstance(reader.events.get(timeout=60), Started)
    deltas = 0
    while reader.events.empty():  # until the long prompt's first token
        event = streaming.events.get(timeout=60)
        assert not isinstance(event, Done | Failed), "the stream ended before the prompt was read"
        deltas += isinstance(event, Delta)
    # 1,500 tokens at most 64 a step: the stream got a token in each of those ~24 steps.
    assert deltas >= 20
    streaming.cancelled.set()
    assert isinstance(collect(reader)[1], Done)


def test_a_request_cancelled_mid_prefill_leaves_within_a_step(paced_engine, long_spec):
    job = long_job(long_spec, 8000)
    paced_engine.submit(job)
    assert isinstance(job.events.get(timeout=60), Started)
    # Its prompt takes ~0.3 s in 64-token steps here; on a busy machine the engine's next
    # turn (which takes it from the queue into the prefill) may come later than any fixed
    # sleep, so wait for it, then check it is still reading (no token yet).
    assert wait_until(lambda: paced_engine.state.models[0].active_sequences == 1, 5)
    assert job.events.empty() and paced_engine.state.running == 1
    job.cancelled.set()
    assert wait_until(lambda: paced_engine.state.running == 0, 5)
    assert job.events.empty()  # cancelled jobs get no more events


def test_greedy_output_is_token_identical_to_mlx_lm(engine, smollm_spec):
    loaded = ModelPool(4 * 2**30).get(smollm_spec)
    prompts = ["Name three rivers.", "What is 2 + 2?", "Write a haiku about rain."]
    params = SamplingParams(temperature=0, max_tokens=24, logit_bias=NO_EOS)
    jobs = [start_job(engine, smollm_spec, p, params) for p in prompts]  # decoded together
    for prompt, job in zip(prompts, jobs, strict=True):
        text, done = collect(job)
        ids = loaded.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True
        )
        expected = "".join(
            r.text
            for r in stream_generate(
                loaded.model,
                loaded.tokenizer,
                ids,
                max_tokens=24,
                sampler=make_sampler(0.0),
                logits_processors=[lambda _, logits: logits.at[:, 2].add(-100.0)],
            )
        )
        assert text == expected
        assert done.completion_tokens == 24


def test_a_request_over_the_prompt_token_limit_is_a_400_naming_it(client, tiny_entry, monkeypatch):
    engine = get_supervisor().engine
    monkeypatch.setattr(engine, "config", replace(engine.config, max_request_prompt_tokens=100))
    body = {"model": "tiny", "prompt": ["word " * 30] * 2, "n": 2, "max_tokens": 2}
    response = client.post("/v1/completions", body, content_type="application/json")
    error = assert_error(response, 400, "prompt", "too_many_prompt_tokens")
    assert re.search(
        r"take \d+ tokens; .* at most 100 .*\(MAX_REQUEST_PROMPT_TOKENS\)\.$", error["message"]
    )
    assert get_supervisor().admission.live == 0
    body["n"] = 1  # 60 tokens
    assert client.post("/v1/completions", body, content_type="application/json").status_code == 200


def test_with_nobody_below_their_share_waiting_no_slot_idles():
    running = [seq("k", "big") for _ in range(20)] + [seq("k", "small")]
    waiting = [seq("k", "big") for _ in range(5)]
    assert len(admit(waiting, running, free=3)) == 3


def test_a_prompt_being_read_is_set_aside_for_a_request_below_its_share():
    reading = [seq("k", "big") for _ in range(4)]
    running = [seq("k", "big") for _ in range(28)] + reading
    waiting = [seq("k", "small"), seq("k", "big")]
    assert starved(waiting, running, 32) == 1
    assert preemptible(waiting, running, reading, 32) == 3  # the newest prompt of the big one
    assert starved([seq("k", "big")], running, 32) == 0


def test_long_prompts_take_more_of_the_batch():
    waiting = [seq("k", "big", prompt_tokens=2000) for _ in range(10)]
    assert len(admit(waiting, [], free=32)) == 8  # 4 slots each
    running = [seq("k", f"chat{i}") for i in range(8)]
    chosen = admit([*waiting, seq("k", "chat8")], running, free=24)
    assert chosen[0].job.group == "chat8"  # both hold nothing: the cheaper first
    assert sum(1 for s in chosen if s.job.group == "big") == 5  # the rest fills, 4 slots each


LIMITS = BatchLimits(alone=24, beside=4)


def test_interactive_sequences_are_admitted_before_batch_ones_that_came_first():
    waiting = [batch(f"b{i}") for i in range(10)] + [seq("k", "chat")]
    assert admit(waiting, [], free=4, limits=LIMITS) == [waiting[-1]]


def test_batch_work_gets_free_slots_only_when_no_interactive_sequence_waits():
    running = [seq("k", f"chat{i}") for i in range(30)]
    waiting = [seq("k", "big")] * 3 + [batch("b0")]
    assert batch("x").job.priority == BATCH
    assert admit(waiting, running, free=2, limits=LIMITS) == waiting[:2]  # no room left over
    chosen = admit([batch(f"b{i}") for i in range(10)], running, free=2, limits=LIMITS)
    assert [s.job.group for s in chosen] == ["b0", "b1"]


def test_batch_work_holds_a_few_slots_beside_interactive_work_and_a_share_alone():
    waiting = [batch(f"b{i}") for i in range(40)]
    assert len(admit(waiting, [], free=32, limits=LIMITS)) == 24  # 8 left for a newcomer
    running = [seq("k", "chat"), batch("old")]
    assert len(admit(waiting, running, free=30, limits=LIMITS)) == 3  # 4 beside, 1 held
    assert admit(waiting, [*running, *waiting[:5]], free=25, limits=LIMITS) == []


def test_a_batch_sequence_larger_than_its_share_leaves_the_interactive_slots_free():
    huge = batch("long", prompt_tokens=20_000)  # 40 slots by its weight
    assert admit([huge], [], free=32, limits=LIMITS) == [huge]  # it takes batch work's share
    assert used([huge], LIMITS) == 24
    chats = [seq("k", f"chat{i}") for i in range(10)]
    assert len(admit(chats, [huge], free=32 - used([huge], LIMITS), limits=LIMITS)) == 8


def test_after_interactive_work_batch_work_regains_its_share_step_by_step():
    limits = BatchLimits(alone=24, beside=2)
    assert limits.cap(interactive=False) == 24  # interactive work never came
    limits.tick([seq("k", "chat"), batch("b0")])
    assert limits.cap(interactive=False) == 2  # it just left: a gap between its requests
    for _ in range(8):
        limits.tick([batch("b0")])
    assert limits.cap(interactive=False) == 4
    for _ in range(200):
        limits.tick([batch("b0")])
    assert limits.cap(interactive=False) == 24 and limits.cap(interactive=True) == 2


def test_no_batch_prompt_starts_while_an_interactive_prompt_is_being_read():
    reading = [seq("k", "chat", prompt_tokens=400)]
    assert admit([batch("b0")], reading, free=20, limits=LIMITS, reading=reading) == []
    assert admit([batch("b0")], reading, free=20, limits=LIMITS, reading=[]) != []


def test_batch_work_keeps_fair_shares_between_its_own_keys():
    waiting = [batch("a0", owner="a") for _ in range(10)]
    waiting += [batch(f"b{i}", owner="b") for i in range(10)]
    chosen = admit(waiting, [], free=8, limits=LIMITS)
    assert [s.job.owner for s in chosen].count("b") == 4


def test_batch_prompts_being_read_are_set_aside_for_an_interactive_newcomer():
    reading = [batch("b0"), seq("k", "old"), batch("b1")]
    running = [*reading, batch("b2")]  # b2 decodes: never interrupted
    waiting = [seq("k", "chat")]
    assert to_set_aside(waiting, running, reading, 32, LIMITS) == 2  # the newest batch prompt
    assert to_set_aside(waiting, running[1:2], reading[1:2], 32, LIMITS) is None
    # Nothing interactive waits or reads: batch prompts keep reading.
    assert to_set_aside([batch("b3")], [batch("b0")], [batch("b0")], 32, LIMITS) is None


def test_without_batch_work_prompts_are_set_aside_as_before():
    reading = [seq("k", "big") for _ in range(4)]
    running = [seq("k", "big") for _ in range(28)] + reading
    waiting = [seq("k", "small"), seq("k", "big")]
    assert to_set_aside(waiting, running, reading, 32, LIMITS) == 3


def test_batch_prompts_read_only_a_small_share_beside_interactive_streams():
    pacer = PrefillPacer(prefill_share=0.5)
    pacer.read(tokens=1000, seconds=1.0)  # 1,000 tokens/s
    pacer.decoded(0.2)
    chat, job = seq("k", "chat"), batch("b0")
    assert pacer.budget_for([job], [chat], 4096) == int(0.2 * BATCH_PREFILL_SHARE / 0.9 * 1000)
    assert pacer.budget_for([chat], [chat], 4096) == 200  # interactive: its usual share
    assert pacer.budget_for([job], [batch("b1")], 4096) == 200  # batch among itself: as ever
    assert pacer.budget_for([chat], [batch("b1")], 4096) == 500  # batch rows wait: idle pace


def test_a_one_line_chat_is_answered_while_a_huge_request_holds_the_batch(long_spec):
    engine = Engine(EngineConfig(pool_budget_bytes=8 * 2**30, prefill_step=64, max_batch=4))
    try:
        words = [" hello", " world", " story", " river", " stone", " cloud", " green", " light"]
        big = [long_job(long_spec, 6000, max_tokens=8, word=w) for w in words]
        for job in big:
            job.group = "big"
        engine.submit(*big)
        assert all(isinstance(job.events.get(timeout=60), Started) for job in big)
        small = long_job(long_spec, 5, max_tokens=8)
        small.group = "small"
        engine.submit(small)
        _, done = collect(small, timeout=60)
        assert isinstance(done, Done) and done.completion_tokens == 8
        early = [job.events.get_nowait() for job in big if not job.events.empty()]
        assert not early, early  # still reading their prompts
        for job in big:
            job.cancelled.set()
    finally:
        engine.stop()


def test_a_prompt_set_aside_mid_read_resumes_to_the_same_answer(long_spec, monkeypatch):
    set_aside = []
    original = PrefillBatch.set_aside

    def counted(self, index):
        set_aside.append(len(self._readings[index].todo))
        return original(self, index)

    monkeypatch.setattr(PrefillBatch, "set_aside", counted)

    def job(tokens: int, group: str, max_tokens: int = 8) -> GenerationJob:
        made = long_job(long_spec, tokens, max_tokens=max_tokens)
        made.group = group
        return made

    engine = Engine(
        EngineConfig(
            pool_budget_bytes=8 * 2**30, prefill_step=64, max_batch=3, prompt_cache_bytes=0
        )
    )
    try:
        alone = job(700, "alone")
        engine.submit(alone)
        expected, _ = collect(alone)
        # The short one decodes at once; the long one is still being read when the small
        # request arrives, so it is the one set aside, part read.
        short, long = job(20, "big", max_tokens=400), job(700, "big")
        engine.submit(short, long)
        assert isinstance(short.events.get(timeout=60), Started)
        assert isinstance(short.events.get(timeout=60), Delta)
        small = job(5, "small")
        engine.submit(small)
        assert isinstance(collect(small)[1], Done)
        assert set_aside and 0 < set_aside[0] < 699
        text, done = collect(long)
        assert isinstance(done, Done) and text == expected
        short.cancelled.set()
    finally:
        engine.stop()


def test_copies_of_a_prompt_in_one_request_read_it_once(paced_engine, long_spec, monkeypatch):
    read = []
    original = PrefillBatch.step

    def counted(self, budget):
        tokens = original(self, budget)
        read.append(tokens)
        return tokens

    monkeypatch.setattr(PrefillBatch, "step", counted)
    alone = long_job(long_spec, 300, max_tokens=6)
    paced_engine.submit(alone)
    expected, _ = collect(alone)
    read.clear()
    copies = [long_job(long_spec, 300, max_tokens=6) for _ in range(4)]
    for job in copies:
        job.group = "n4"
    paced_engine.submit(*copies)
    started = [job.events.get(timeout=60) for job in copies]
    assert [s.cached_tokens for s in started] == [0] + [started[0].prompt_tokens - 1] * 3
    for job in copies:
        text, done = collect(job)
        assert isinstance(done, Done) and text == expected
    assert 299 <= sum(read) < 2 * 300  # one copy read, padding aside


def test_cancelling_a_request_with_copies_frees_them_all(paced_engine, long_spec):
    copies = [long_job(long_spec, 3000) for _ in range(3)]
    for job in copies:
        job.group = "n3"
    paced_engine.submit(*copies)
    assert all(isinstance(job.events.get(timeout=60), Started) for job in copies)
    assert wait_until(lambda: paced_engine.state.running == 3, 5)
    copies[0].cancelled.set()  # the one being read goes first; the others queue on their own
    assert wait_until(lambda: paced_engine.state.running == 2, 5)
    assert wait_until(lambda: paced_engine.state.models[0].active_sequences == 1, 5)  # one reads
    for job in copies[1:]:
        job.cancelled.set()
    assert wait_until(lambda: paced_engine.state.running == 0, 5)
