"""The asyncio side of the engine: submit jobs, receive their events through one asyncio queue."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from inference.adapters import FamilyAdapter
from inference.engine.types import (
    Done,
    EngineError,
    ErrorKind,
    Event,
    Failed,
    GenerationJob,
    ModelSpec,
    Prompt,
    SamplingParams,
)
from inference.runtime import get_supervisor


@dataclass(frozen=True)
class JobRequest:
    spec: ModelSpec
    adapter: FamilyAdapter
    prompt: Prompt
    params: SamplingParams
    echo: bool = False


async def generate(requests: list[JobRequest]) -> AsyncIterator[tuple[int, Event]]:
    """Yields (job index, event) until every job is Done or Failed; closing it cancels them all."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[tuple[int, Event]] = asyncio.Queue()

    def sink_for(index: int):
        def sink(event: Event) -> None:
            loop.call_soon_threadsafe(events.put_nowait, (index, event))

        return sink

    supervisor = get_supervisor()
    engine = supervisor.engine
    retry_after = supervisor.admission.try_admit(len(requests), engine.decoding)
    if retry_after is not None:
        yield 0, Failed(overloaded(supervisor.admission.max_queued, retry_after))
        return
    jobs: list[GenerationJob] = []
    try:
        for i, r in enumerate(requests):
            jobs.append(
                GenerationJob(r.spec, r.adapter, r.prompt, r.params, sink_for(i), echo=r.echo)
            )
            engine.submit(jobs[-1])
        remaining = len(jobs)
        while remaining:
            index, event = await events.get()
            yield index, event
            remaining -= isinstance(event, Done | Failed)
    finally:
        # Client gone, view cancelled or finished: the engine drops the sequences next step.
        for job in jobs:
            job.cancelled.set()
        supervisor.admission.finish(len(requests))


def overloaded(max_queued: int, retry_after: float) -> EngineError:
    return EngineError(
        ErrorKind.OVERLOADED,
        f"The server is at capacity ({max_queued} requests already waiting); "
        f"retry in {retry_after:.0f} s.",
        retry_after=retry_after,
    )
