"""Generation's own logic over a scripted engine: admission, n choices, usage per distinct
prompt, the deadline, a job failing midway, and closing."""

from __future__ import annotations

import asyncio

import pytest

from inference.engine.types import (
    BATCH,
    INTERACTIVE,
    Delta,
    Done,
    EngineError,
    ErrorKind,
    Failed,
    Started,
)
from inference.protocol.errors import APIError
from inference.serving.drain import drain
from inference.serving.generation import TRUNCATED_HEADER
from inference.serving.usage import TokenUsage
from tests.serving.engine_events import (
    DEVICE_LOST,
    broken,
    context,
    generation_of,
    jobs,
    reply,
)

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = [pytest.mark.database_independent, pytest.mark.usefixtures("prepared")]


async def texts(generation) -> dict[int, str]:
    async for _ in generation.events():
        pass
    return {i: c.text for i, c in generation.choices.items()}


def test_admission_waits_for_every_job_and_keeps_early_events():
    # Job 0 writes before job 1 is admitted: its events wait, in order, for events().
    script = [
        (0, Started(3)),
        (0, Delta("a")),
        (1, Started(3)),
        (0, Delta("b")),
        (0, Done("stop", 3, 2)),
        *reply("xy", index=1)[1:],
    ]

    async def go():
        ctx = context(script)
        generation = await generation_of(ctx, jobs(1, n=2), n=2)
        assert sorted(generation.choices) == [0, 1]  # both admitted before start returns
        assert generation.id.startswith("chatcmpl-")
        return await texts(generation)

    assert asyncio.run(go()) == {0: "ab", 1: "xy"}


def test_a_request_s_priority_reaches_the_engine_with_its_jobs():
    async def go(priority: str | None) -> list[str]:
        ctx = context(reply("ok"))
        if priority is not None:
            ctx.priority = priority  # a Batch API line's context says "batch"
        await texts(await generation_of(ctx, jobs(), n=1))
        return ctx.scripted.priorities

    assert asyncio.run(go(None)) == [INTERACTIVE]
    assert asyncio.run(go(BATCH)) == [BATCH]


def test_a_job_refused_at_admission_is_the_request_error_and_frees_everything():
    too_long = EngineError(ErrorKind.CONTEXT_LENGTH_EXCEEDED, "too long", prompt_tokens=9)
    script = [(0, Started(3)), (1, Failed(too_long))]

    async def go():
        ctx = context(script)
        with pytest.raises(APIError) as refused:
            await generation_of(ctx, jobs(2))
        return ctx, refused.value

    ctx, error = asyncio.run(go())
    assert (error.status, error.code) == (400, "context_length_exceeded")
    assert ctx.scripted.stream.releases >= 1  # the engine drops both jobs


def test_a_full_queue_is_a_429_before_any_job_runs():
    overloaded = EngineError(ErrorKind.OVERLOADED, "busy", retry_after=2.4)
    with pytest.raises(APIError) as refused:
        asyncio.run(generation_of(context(error=overloaded), jobs(1)))
    assert (refused.value.status, refused.value.headers["Retry-After"]) == (429, "2")


def test_more_sequences_than_the_server_runs_is_a_400(settings):
    settings.MAX_REQUEST_SEQUENCES = 3
    ctx = context()
    with pytest.raises(APIError) as refused:
        asyncio.run(generation_of(ctx, jobs(2, n=2), n=2))
    assert (refused.value.code, refused.value.param) == ("too_many_sequences", "n")
    assert ctx.scripted.started == []


def test_no_generation_starts_while_draining(monkeypatch):
    monkeypatch.setattr(drain, "draining", True)
    ctx = context(reply("hi"))
    with pytest.raises(APIError) as refused:
        asyncio.run(generation_of(ctx, jobs(1)))
    assert (refused.value.status, refused.value.code) == (503, "shutting_down")
    assert ctx.scripted.started == []


def test_usage_counts_each_distinct_prompt_once_and_every_choice():
    # Two prompts, n=2: the copies of one prompt share its prompt tokens and cache.
    def admitted(index: int, prompt_tokens: int) -> tuple:
        return (index, Started(prompt_tokens, cached_tokens=2, truncated_messages=1))

    script = [admitted(0, 10), admitted(1, 10), admitted(2, 7), admitted(3, 7)]
    script += [(i, Done("stop", 0, i + 1)) for i in range(4)]

    async def go():
        ctx = context(script)
        generation = await generation_of(ctx, jobs(2, n=2), n=2)
        await generation.finish()
        return ctx, generation.usage()

    ctx, usage = asyncio.run(go())
    assert usage == TokenUsage(prompt=17, completion=10, cached=4, truncated_messages=2)
    assert usage.total == 27
    assert ctx.headers[TRUNCATED_HEADER] == "2"  # known before a stream's first line
    record = ctx.record
    assert (record.prompt_tokens, record.completion_tokens, record.cached_tokens) == (17, 10, 4)
    assert record.finish_reason == "stop"


def test_a_job_failing_midway_raises_its_error_after_what_came_before():
    async def go():
        ctx = context(broken("abc"))
        generation = await generation_of(ctx, jobs(1))
        seen = []
        with pytest.raises(APIError) as failed:
            async for _, event in generation.events():
                seen.append(event.text)
        return ctx, seen, failed.value

    ctx, seen, error = asyncio.run(go())
    assert seen == ["a", "b", "c"]
    assert (error.status, error.code) == (500, "server_error")
    assert DEVICE_LOST.message not in error.message  # the engine's words stay in the log
    assert ctx.record.error_code == "server_error"
    assert ctx.scripted.stream.releases >= 1


def test_finish_raises_a_failure_too():
    async def go():
        generation = await generation_of(context(broken("a")), jobs(1))
        await generation.finish()

    with pytest.raises(APIError):
        asyncio.run(go())


def test_the_deadline_ends_a_stream_that_stops_sending(settings):
    settings.REQUEST_TIMEOUT = 0.05
    script = reply("abc")[:-1]  # never Done

    async def go():
        ctx = context(script)
        generation = await generation_of(ctx, jobs(1))
        with pytest.raises(APIError) as late:
            await texts(generation)
        return ctx, generation, late.value

    ctx, generation, error = asyncio.run(go())
    assert (error.status, error.code) == (504, "timeout")
    assert generation.choices[0].text == "abc"  # what came before the deadline stays
    assert ctx.record.error_code == "timeout"


def test_a_shutdown_brings_the_deadline_forward():
    async def go():
        generation = await generation_of(context(reply("abc")[:-1]), jobs(1))
        generation.cut_at(asyncio.get_running_loop().time())
        with pytest.raises(APIError) as cut:
            await texts(generation)
        return cut.value

    error = asyncio.run(go())
    assert (error.status, error.code) == (503, "shutting_down")


def test_closing_the_request_releases_the_jobs_and_records_once():
    async def go():
        ctx = context(reply("abcd"))
        generation = await generation_of(ctx, jobs(1))
        _, event = await anext(generation.events())  # the client reads one token, leaves
        ctx.close()
        ctx.close()
        return ctx, event

    ctx, event = asyncio.run(go())
    assert event == Delta("a")
    assert ctx.scripted.stream.releases >= 1  # JobStream.release itself acts only once
    assert ctx.record._finished
    assert ctx.record.prompt_tokens == 3 and ctx.record.completion_tokens == 0
