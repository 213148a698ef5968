"""The asyncio side of the engine: submit a job, receive its events through an asyncio queue."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from inference.adapters import FamilyAdapter
from inference.engine.types import (
    Done,
    Event,
    Failed,
    GenerationJob,
    ModelSpec,
    SamplingParams,
)
from inference.runtime import get_engine


async def generate(
    spec: ModelSpec, adapter: FamilyAdapter, messages: list[dict], params: SamplingParams
) -> AsyncIterator[Event]:
    """Yields the job's events until Done or Failed; closing it early cancels the job."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[Event] = asyncio.Queue()

    def sink(event: Event) -> None:
        loop.call_soon_threadsafe(events.put_nowait, event)

    job = GenerationJob(spec, adapter, messages, params, sink)
    get_engine().submit(job)
    try:
        while True:
            event = await events.get()
            yield event
            if isinstance(event, Done | Failed):
                return
    finally:
        # Client gone, view cancelled or finished: the engine drops the sequence next step.
        job.cancelled.set()
