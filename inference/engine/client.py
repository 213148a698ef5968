"""The asyncio side of the engine: submit jobs, receive their events through one asyncio queue."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from inference.adapters import FamilyAdapter
from inference.engine.types import (
    Done,
    Event,
    Failed,
    GenerationJob,
    ModelSpec,
    Prompt,
    SamplingParams,
)
from inference.runtime import get_engine


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

    jobs = [
        GenerationJob(r.spec, r.adapter, r.prompt, r.params, sink_for(i), echo=r.echo)
        for i, r in enumerate(requests)
    ]
    engine = get_engine()
    for job in jobs:
        engine.submit(job)
    remaining = len(jobs)
    try:
        while remaining:
            index, event = await events.get()
            yield index, event
            remaining -= isinstance(event, Done | Failed)
    finally:
        # Client gone, view cancelled or finished: the engine drops the sequences next step.
        for job in jobs:
            job.cancelled.set()
