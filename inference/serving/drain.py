"""Graceful shutdown: once draining, no new generation starts, and those still running at the
drain deadline end with an error the client can read (an SSE error event, or a 503)."""

from __future__ import annotations

import asyncio
import weakref
from typing import Protocol

from inference.engine.types import EngineError, ErrorKind
from inference.serving.errors import api_error

SHUTTING_DOWN = EngineError(
    ErrorKind.SHUTTING_DOWN, "The server is shutting down; retry the request."
)


class Cuttable(Protocol):
    def cut_at(self, deadline: float) -> None: ...


class Drain:
    def __init__(self) -> None:
        self.draining = False
        self.deadline: float | None = None  # on the event loop's clock
        self._running: weakref.WeakSet[Cuttable] = weakref.WeakSet()

    def register(self, generation: Cuttable) -> None:
        self._running.add(generation)
        if self.deadline is not None:
            generation.cut_at(self.deadline)

    def begin(self, timeout: float) -> int:
        """Runs on the event loop; returns how many generations are still running."""
        self.draining = True
        self.deadline = asyncio.get_running_loop().time() + timeout
        running = list(self._running)
        for generation in running:
            generation.cut_at(self.deadline)
        return len(running)


drain = Drain()


def refuse_if_draining() -> None:
    """A 503 once the server drains: nothing new starts on the way out. Checked when a request
    is admitted (prelude.admit) and again when its jobs reach the engine (Generation.start),
    since planning (images fetched, prompts rendered) awaits in between."""
    if drain.draining:
        raise api_error(SHUTTING_DOWN)
