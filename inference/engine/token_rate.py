"""A model's recent decode rate: tokens produced over the last RATE_WINDOW seconds of steps
(what /health and the metrics show as its tokens/s)."""

from __future__ import annotations

import time
from collections import deque

RATE_WINDOW = 10.0  # seconds of decode steps behind tokens/s


class TokenRate:
    """Engine thread only, like the runner it counts for."""

    def __init__(self) -> None:
        self._recent: deque[tuple[float, int]] = deque()  # (when, tokens) of recent steps

    def count(self, tokens: int) -> None:
        now = time.monotonic()
        self._recent.append((now, tokens))
        while self._recent and self._recent[0][0] < now - RATE_WINDOW:
            self._recent.popleft()

    def per_second(self) -> float:
        now = time.monotonic()
        return sum(n for t, n in self._recent if t >= now - RATE_WINDOW) / RATE_WINDOW
