"""The one way into the engine from outside its thread: start jobs, run calls, read health.

Serving gets an EngineHandle from inference/runtime.py and never touches Engine, Supervisor or
Admission itself. The handle outlives engine restarts: it always reaches the current engine.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from functools import partial
from operator import methodcaller
from typing import TYPE_CHECKING, TypeVar

from inference.engine.state import EngineHealth
from inference.engine.types import (
    BATCH,
    INTERACTIVE,
    Done,
    Embedded,
    EmbeddingJob,
    EngineError,
    ErrorKind,
    Event,
    Failed,
    GenerationJob,
    ImagePrompt,
    JobRequest,
    ModelSpec,
)

if TYPE_CHECKING:
    from inference.engine.admission import Admission
    from inference.engine.supervisor import Supervisor
    from inference.engine.worker import Engine

T = TypeVar("T")


class JobStream:
    """A request's jobs on the engine and their events, in the order they come.

    `release()` cancels whatever still runs and gives back the admission slots; it is safe to
    call from any thread, any number of times, and only the first call counts."""

    def __init__(
        self,
        engine: Engine,
        admission: Admission,
        requests: list[JobRequest],
        owner: str = "",
        group: str = "",
        priority: str = INTERACTIVE,
    ) -> None:
        self._admission = admission
        self._priority = priority
        self._count = len(requests)
        self._remaining = len(requests)
        self._events: asyncio.Queue[tuple[int, Event]] = asyncio.Queue()
        self._released = False
        self._lock = threading.Lock()
        self.jobs: list[GenerationJob] = []
        loop = asyncio.get_running_loop()
        try:
            for index, r in enumerate(requests):
                sink = partial(self._deliver, loop, index)
                job = GenerationJob(
                    r.spec, r.prompt, r.params, sink, r.echo, r.stop_ids, r.stop_strings, r.matcher
                )
                job.owner, job.group, job.priority = owner, group, priority
                self.jobs.append(job)
            engine.submit(*self.jobs)
        except BaseException:
            self.release()
            raise

    def _deliver(self, loop: asyncio.AbstractEventLoop, index: int, event: Event) -> None:
        # On the engine thread; raises once the loop is closed, which cancels the job.
        loop.call_soon_threadsafe(self._events.put_nowait, (index, event))

    async def next(self) -> tuple[int, Event] | None:
        """The next (job index, event); None once every job is Done or Failed."""
        if not self._remaining:
            return None
        index, event = await self._events.get()
        self._remaining -= isinstance(event, Done | Failed)
        return index, event

    def __del__(self) -> None:
        # A backstop for a request lost without closing (the engine's jobs hold their sinks,
        # so this runs only once no sequence of it is left).
        if hasattr(self, "jobs"):
            self.release()

    def release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        for job in self.jobs:  # the engine drops their sequences on its next step
            job.cancelled.set()
        self._admission.finish(self._count, self._priority)


class EngineHandle:
    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor

    def start(
        self,
        requests: list[JobRequest],
        owner: str = "",
        group: str = "",
        priority: str = INTERACTIVE,
    ) -> JobStream:
        """Admits and submits one request's jobs (`owner`: who sent it, `group`: which
        request, for fair shares; `priority`: interactive, or batch for work that runs in
        what interactive work leaves); raises EngineError: OVERLOADED past its queue's cap
        (worth a retry), INVALID_REQUEST for more sequences than the queue holds (never
        worth one)."""
        supervisor = self._supervisor
        admission = supervisor.admission
        cap = admission.lane(priority).max_queued
        if len(requests) > cap:  # would wait forever: no retry can help
            raise EngineError(
                ErrorKind.INVALID_REQUEST,
                f"{len(requests)} sequences in one request; at most {cap} fit.",
                param="n",
            )
        decoding = supervisor.engine.state.decoding_of(priority)
        retry_after = admission.try_admit(len(requests), decoding, priority)
        if retry_after is not None:
            raise overloaded(cap, retry_after, priority)
        return JobStream(supervisor.engine, admission, requests, owner, group, priority)

    async def embed(
        self,
        spec: ModelSpec,
        inputs: list[str | tuple[int, ...]],
        max_tokens: int | None = None,
        truncate: bool = False,
        owner: str = "",
        priority: str = INTERACTIVE,
    ) -> Embedded:
        """One request's embeddings, admitted like a generation (one slot in its priority's
        queue: 429 past the cap); raises EngineError for what the engine refuses. Cancelled
        (client gone, request timed out), the engine drops the request's rows on its next
        step."""
        supervisor = self._supervisor
        admission = supervisor.admission
        decoding = supervisor.engine.state.decoding_of(priority)
        retry_after = admission.try_admit(1, decoding, priority)
        if retry_after is not None:
            raise overloaded(admission.lane(priority).max_queued, retry_after, priority)
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Embedded | Failed] = loop.create_future()

        def sink(event: Embedded | Failed) -> None:  # on the engine thread
            loop.call_soon_threadsafe(lambda: answer.done() or answer.set_result(event))

        job = EmbeddingJob(spec, inputs, sink, max_tokens, truncate, owner=owner, priority=priority)
        try:
            supervisor.engine.submit(job)
            event = await answer
        finally:
            job.cancelled.set()
            admission.finish(1, priority)
        if isinstance(event, Failed):
            raise event.error
        return event

    async def rerank(
        self,
        spec: ModelSpec,
        pairs: list[tuple[int, ...]],
        owner: str = "",
        priority: str = INTERACTIVE,
    ) -> list[float]:
        """One score per (query, document) pair of ids (engine/rerank/tokens.py), in order:
        an embedding job whose vectors are the reranker's one score each, so it is admitted,
        batched and cancelled exactly as embeddings are."""
        scored = await self.embed(spec, list(pairs), owner=owner, priority=priority)
        return [float(vector[0]) for vector in scored.vectors]

    async def call(self, run: Callable[[Engine], T]) -> T:
        """Runs `run(engine)` on the engine thread between steps and returns its result."""
        return await asyncio.wrap_future(self._supervisor.engine.call(run))

    async def count_image_prompt(self, spec: ModelSpec, prompt: ImagePrompt) -> int:
        """How many tokens a prompt with images takes: only the model's own processor knows
        how many each image expands to (loading the model if needed)."""
        # A methodcaller: it may load the model, which every rank of a group must do too.
        return await self.call(methodcaller("count_image_prompt", spec, prompt))

    def health(self) -> EngineHealth:
        return self._supervisor.health()

    def inject_fault(self, kind: str, seconds: float = 0) -> None:
        """Recovery drills: crash the engine thread, or wedge it for `seconds`."""
        engine = self._supervisor.engine
        if kind == "crash":
            engine.request_crash()
        elif kind == "stall" and seconds > 0:
            engine.call(lambda engine: time.sleep(seconds))
        else:
            raise ValueError(kind)

    def stop(self) -> None:
        self._supervisor.stop()


def overloaded(max_queued: int, retry_after: float, priority: str = INTERACTIVE) -> EngineError:
    if priority == BATCH:  # what a batch runner reads: wait, then submit the line again
        message = (
            f"The batch-priority queue is full ({max_queued} sequences already waiting, "
            f"MAX_QUEUED_BATCH_REQUESTS); retry in {retry_after:.0f} s."
        )
    else:
        message = (
            f"The server is at capacity ({max_queued} requests already waiting); "
            f"retry in {retry_after:.0f} s."
        )
    return EngineError(ErrorKind.OVERLOADED, message, retry_after=retry_after)
