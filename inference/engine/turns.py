"""The engine's turns: what the engine thread does next, decided from its inbox (alone, or as
a group's leader; a follower's turn comes from its leader, engine/lockstep.py), then applied
the same way on every rank."""

from __future__ import annotations

import itertools
import queue
import secrets
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from functools import partial
from typing import Any

from inference.engine.batching import ModelRunner
from inference.engine.inbox import Command
from inference.engine.lockstep import Turn
from inference.engine.parts import EngineParts, Job
from inference.engine.types import EngineError, ErrorKind, Failed, GenerationJob

# The inbox item that ends the engine thread (Engine.stop, Engine.abandon).
STOP = object()


class Turns:
    """Engine thread only. Reads the inbox, numbers the jobs it takes, and keeps them by id
    (`taken`), so that a later turn can name the ones cancelled to every rank. `publish`
    swaps in a fresh state after each command: its caller reads the state next."""

    def __init__(
        self,
        parts: EngineParts,
        inbox: queue.SimpleQueue,
        publish: Callable[[], None],
        abandoned: Callable[[], bool],
    ) -> None:
        self._parts = parts
        self._inbox = inbox
        self._publish = publish
        self._abandoned = abandoned  # read at each item: a wedged thread that wakes up exits
        # Jobs taken from the inbox, by the id every rank knows them by.
        self.taken: weakref.WeakValueDictionary[int, Job] = weakref.WeakValueDictionary()
        self._ids = itertools.count(1)

    def decide(self, block: bool) -> Turn:
        """This turn's work, decided here (alone, or as a group's leader): what the inbox
        holds, which jobs were cancelled, which models idled out, how prompts are paced.
        A follower's turn comes from its leader instead (link.share ignores this one)."""
        parts = self._parts
        if parts.link.rank:
            return Turn()
        items, stop = self._take(block)
        return Turn(
            items=items,
            cancelled=[i for i, job in list(self.taken.items()) if _cancelled(job)],
            evict=parts.pool.idle_models(parts.config.idle_ttl),
            pacing=self._pacing() if parts.link.distributed else {},
            stop=stop,
        )

    def _pacing(self) -> dict[str, tuple[float, float]]:
        """What followers need to budget prompt reading as this rank does (alone: nothing)."""
        runners = self._parts.runners
        return {m: r.pacing for m, r in runners.items() if isinstance(r, ModelRunner)}

    def _take(self, block: bool) -> tuple[list, bool]:
        """Inbox items (job lists, commands) until it is empty; True once told to stop."""
        pulse = self._parts.pulse
        items: list = []
        while True:
            pulse.idle = block
            try:
                item = self._inbox.get(block=block, timeout=self._idle_wait() if block else None)
            except queue.Empty:
                return items, False
            finally:
                pulse.idle = False
                pulse.beat()
            if item is STOP or self._abandoned():
                return items, True
            if item is None:  # a wake-up call
                return items, False
            if isinstance(item, list):
                item = self._number(item)
            if item:
                items.append(item)
            block = False

    def _number(self, jobs: list[Job]) -> list[Job]:
        """Ids, and a seed for every sampler without one, so that every rank samples alike;
        a request that cannot travel to a group's followers is refused here."""
        link = self._parts.link
        if link.distributed and not link.portable(jobs):
            error = EngineError(
                ErrorKind.INVALID_REQUEST, "this request cannot be shared with the group"
            )
            for job in jobs:
                self._parts.emit(job, Failed(error))
            return []
        for job in jobs:
            job.id = next(self._ids)
            if isinstance(job, GenerationJob) and job.params.seed is None:
                job.params = replace(job.params, seed=secrets.randbits(63))
        return jobs

    def _idle_wait(self) -> float | None:
        """How long an idle engine may sleep: until an idle model is due for unloading, or
        a group's leader is due to show its followers it is alive."""
        parts = self._parts
        waits = [parts.link.heartbeat]
        deadline = parts.pool.next_idle_deadline(parts.config.idle_ttl)
        if deadline is not None:
            waits.append(max(0.0, deadline - time.monotonic()) + 0.05)
        waits = [w for w in waits if w is not None]
        return min(waits) if waits else None

    def apply(self, turn: Turn, engine: Any, start: Callable[[list[Job]], None]) -> None:
        """The same on every rank: jobs known by id, cancellations, evictions, pacing, then
        the inbox's items in order (commands run with `engine`, jobs go to `start`)."""
        parts = self._parts
        for item in turn.items:
            if isinstance(item, list):
                self.taken.update((job.id, job) for job in item)
        for job_id in turn.cancelled:
            job = self.taken.get(job_id)
            if job is not None:
                job.dropped = True
        for model_id in turn.evict:
            if parts.pool.unload(model_id):
                parts.pool.evictions += 1
        for model_id, pacing in turn.pacing.items():
            runner = parts.runners.get(model_id)
            if isinstance(runner, ModelRunner):
                runner.pacing = pacing
        for item in turn.items:
            if isinstance(item, Command):
                self._execute(item, engine)
            else:
                start(item)

    def _execute(self, command: Command, engine: Any) -> None:
        if not command.future.set_running_or_notify_cancel():
            return
        try:
            result = command.run(engine)
        except BaseException as exc:  # delivered to the caller, never raised here
            self._publish()
            command.future.set_exception(exc)
        else:
            self._publish()  # a caller that reads the state next sees what it did
            if isinstance(result, Future):  # answered later (a model read on the loader)
                result.add_done_callback(partial(_pass_on, command.future))
            else:
                command.future.set_result(result)


def _pass_on(target: Future, source: Future) -> None:
    error = source.exception()
    if error is not None:
        target.set_exception(error)
    else:
        target.set_result(source.result())


def _cancelled(job: Job) -> bool:
    return job.cancelled.is_set() and not job.dropped
