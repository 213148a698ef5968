"""Graceful shutdown: once draining, no new generation starts, and those still running at the
drain deadline end with an error the client can read (an SSE error event, or a 503)."""

from __future__ import annotations

import asyncio
import weakref
from typing import Protocol


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
