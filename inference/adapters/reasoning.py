"""Thinking out of a reasoning model's text, while it streams.

The thinking sits between two markers (`<think>` … `</think>`). Either the reply opens it
(after any whitespace), or the chat template already did in the prompt and the reply starts
inside it. A marker may arrive split over several tokens, so a piece that could be the start
of one is held until the next piece tells."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

# "calls": text that is tool calls for certain (a family whose framing says so, as harmony's
# recipient does), handed to its tool-call syntax without looking for a marker.
Part = tuple[Literal["reasoning", "content", "calls"], str]


@dataclass(frozen=True)
class Thinking:
    """How a reply's reasoning is marked in the text the model writes."""

    start: str
    end: str
    opened: bool  # the prompt already opened the thinking: the reply starts inside it


class ReplyReader(Protocol):
    """Splits a reply's text, as it streams, into reasoning, content and calls."""

    def feed(self, text: str) -> list[Part]: ...

    def finish(self) -> list[Part]: ...


def partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of `text` that is a proper start of `marker`."""
    for size in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


class ReasoningSplitter:
    def __init__(self, start: str, end: str, opened: bool) -> None:
        self._start = start
        self._end = end
        self._state: Literal["before", "inside", "after"] = "inside" if opened else "before"
        self._held = ""  # text that may still turn out to be (part of) a marker
        self._reasoning_started = False  # leading whitespace of the thinking is dropped
        self._pending_space = ""  # whitespace that ends the thinking is dropped too
        self._content_started = False  # and so is whitespace between thinking and answer
        self._had_reasoning = opened

    def feed(self, text: str) -> list[Part]:
        self._held += text
        parts: list[Part] = []
        while self._held:
            progressed = getattr(self, f"_{self._state}")(parts)
            if not progressed:
                break
        return [(kind, piece) for kind, piece in parts if piece]

    def finish(self) -> list[Part]:
        """The end of the reply: whatever was held was no marker after all."""
        held, self._held = self._held, ""
        if self._state == "inside":
            return [("reasoning", self._reasoning_text(held))] if held.strip() else []
        if self._state == "before":
            return [("content", held)] if held else []
        return self._content(held)

    def _before(self, parts: list[Part]) -> bool:
        head = self._held.lstrip()
        if not head:
            return False  # only whitespace so far
        if head.startswith(self._start):
            self._held = head[len(self._start) :]
            self._state = "inside"
            self._had_reasoning = True
            return True
        if self._start.startswith(head):
            return False  # could still be the opening marker
        self._state = "after"
        self._content_started = True  # no thinking: the text is left exactly as written
        return True

    def _inside(self, parts: list[Part]) -> bool:
        found = self._held.find(self._end)
        if found >= 0:
            parts.append(("reasoning", self._reasoning_text(self._held[:found])))
            self._held = self._held[found + len(self._end) :]
            self._state = "after"
            return True
        keep = partial_suffix(self._held, self._end)
        ready, self._held = (
            self._held[: len(self._held) - keep],
            self._held[len(self._held) - keep :],
        )
        parts.append(("reasoning", self._reasoning_text(ready, more=True)))
        return False

    def _after(self, parts: list[Part]) -> bool:
        held, self._held = self._held, ""
        parts.extend(self._content(held))
        return False

    def _content(self, text: str) -> list[Part]:
        if not self._content_started:
            text = text.lstrip()
            self._content_started = bool(text)
        return [("content", text)] if text else []

    def _reasoning_text(self, text: str, more: bool = False) -> str:
        if not self._reasoning_started:
            text = text.lstrip()
            self._reasoning_started = bool(text)
        text = self._pending_space + text
        if not more:
            self._pending_space = ""
            return text.rstrip()
        stripped = text.rstrip()
        self._pending_space = text[len(stripped) :]
        return stripped
