"""Admission control: a bounded queue in front of the engine, so overload is a quick 429
with a useful Retry-After rather than an ever longer wait."""

from __future__ import annotations

import math
import threading
import time
from collections import deque

RECENT = 64  # finished sequences behind the completion-rate estimate


class Admission:
    def __init__(self, max_queued: int) -> None:
        self.max_queued = max_queued
        self.live = 0  # sequences admitted and not yet finished or abandoned
        self._finished: deque[float] = deque(maxlen=RECENT)
        # Reentrant: a lost JobStream's finalizer may give its slots back in the middle of
        # try_admit on the same thread, when the garbage collector happens to run there.
        self._lock = threading.RLock()

    def try_admit(self, count: int, decoding: int) -> float | None:
        """Admits `count` sequences, or returns the seconds to wait before retrying.
        `decoding` is how many live sequences the engine is decoding: the rest wait."""
        with self._lock:
            queued = max(0, self.live - decoding)
            if queued + count > self.max_queued:
                return self._retry_after(queued + count - self.max_queued)
            self.live += count
            return None

    def finish(self, count: int) -> None:
        now = time.monotonic()
        with self._lock:
            self.live -= count
            self._finished.extend([now] * count)

    def queued(self, decoding: int) -> int:
        return max(0, self.live - decoding)

    def _retry_after(self, excess: int) -> float:
        """Seconds until `excess` sequences have likely finished, at the recent pace."""
        if len(self._finished) < 2:
            return 1.0
        span = time.monotonic() - self._finished[0]
        rate = len(self._finished) / max(span, 1e-3)
        return float(min(60, max(1, math.ceil(excess / rate))))
