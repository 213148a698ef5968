"""Admission control: a bounded queue in front of the engine, so overload is a quick 429
with a useful Retry-After rather than an ever longer wait.

Interactive and batch-priority work (types.PRIORITIES) queue apart, each under its own cap
(MAX_QUEUED_REQUESTS, MAX_QUEUED_BATCH_REQUESTS): a batch runner that submits faster than the
engine runs its lines fills only its own queue, and an interactive request is never refused
because batch work waits. A batch line past its cap gets a 429 that says so, with the seconds
until its queue has likely moved, so the runner waits and retries.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque

from inference.engine.types import BATCH, INTERACTIVE, PRIORITIES

RECENT = 64  # finished sequences behind the completion-rate estimate


class Lane:
    """One priority's queue: its sequences admitted and not yet finished, and its pace."""

    def __init__(self, max_queued: int) -> None:
        self.max_queued = max_queued
        self.live = 0
        self.finished: deque[float] = deque(maxlen=RECENT)

    def retry_after(self, excess: int) -> float:
        """Seconds until `excess` sequences have likely finished, at the recent pace."""
        if len(self.finished) < 2:
            return 1.0
        span = time.monotonic() - self.finished[0]
        rate = len(self.finished) / max(span, 1e-3)
        return float(min(60, max(1, math.ceil(excess / rate))))


class Admission:
    def __init__(self, max_queued: int, max_queued_batch: int | None = None) -> None:
        batch = max_queued if max_queued_batch is None else max_queued_batch
        self.lanes = {INTERACTIVE: Lane(max_queued), BATCH: Lane(batch)}
        # Reentrant: a lost JobStream's finalizer may give its slots back in the middle of
        # try_admit on the same thread, when the garbage collector happens to run there.
        self._lock = threading.RLock()

    @property
    def max_queued(self) -> int:
        """The interactive queue's cap (each lane has its own)."""
        return self.lanes[INTERACTIVE].max_queued

    @max_queued.setter
    def max_queued(self, value: int) -> None:
        self.lanes[INTERACTIVE].max_queued = value

    @property
    def live(self) -> int:
        """Sequences admitted and not yet finished or abandoned, of every priority; setting
        it moves the interactive lane's count (a drill's sequence that never decodes)."""
        return sum(lane.live for lane in self.lanes.values())

    @live.setter
    def live(self, value: int) -> None:
        self.lanes[INTERACTIVE].live += value - self.live

    def lane(self, priority: str) -> Lane:
        if priority not in PRIORITIES:
            raise ValueError(f"priority {priority!r}: one of {', '.join(PRIORITIES)}")
        return self.lanes[priority]

    def try_admit(self, count: int, decoding: int, priority: str = INTERACTIVE) -> float | None:
        """Admits `count` sequences, or returns the seconds to wait before retrying.
        `decoding` is how many live sequences of this priority the engine has in a batch:
        the rest wait."""
        lane = self.lane(priority)
        with self._lock:
            queued = max(0, lane.live - decoding)
            if queued + count > lane.max_queued:
                return lane.retry_after(queued + count - lane.max_queued)
            lane.live += count
            return None

    def finish(self, count: int, priority: str = INTERACTIVE) -> None:
        lane = self.lane(priority)
        now = time.monotonic()
        with self._lock:
            lane.live -= count
            lane.finished.extend([now] * count)

    def queued(self, decoding: int, priority: str = INTERACTIVE) -> int:
        return max(0, self.lane(priority).live - decoding)
