"""Stop strings matched on decoded text, across token boundaries."""

from __future__ import annotations


class StopStringMatcher:
    """Releases text only once it can no longer be the start of a stop string.

    A stop string split over several tokens is still caught, and no part of it ever
    reaches the client.
    """

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._pending = ""
        self.matched: str | None = None  # the stop string that was hit (Anthropic reports it)

    def feed(self, text: str) -> tuple[str, bool]:
        """Returns (text safe to send, whether a stop string was hit)."""
        self._pending += text
        if not self._stops:
            return self.flush(), False
        hits = [(i, s) for s in self._stops if (i := self._pending.find(s)) >= 0]
        if hits:
            at, self.matched = min(hits, key=lambda hit: hit[0])
            released = self._pending[:at]
            self._pending = ""
            return released, True
        keep = self._held_suffix_length()
        cut = len(self._pending) - keep
        released, self._pending = self._pending[:cut], self._pending[cut:]
        return released, False

    def flush(self) -> str:
        released, self._pending = self._pending, ""
        return released

    def _held_suffix_length(self) -> int:
        longest = max(len(s) for s in self._stops) - 1
        for size in range(min(longest, len(self._pending)), 0, -1):
            tail = self._pending[-size:]
            if any(s.startswith(tail) for s in self._stops):
                return size
        return 0
