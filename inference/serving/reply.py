"""A reply as the model writes it, split while it streams into reasoning, text and tool calls,
as events every dialect turns into its own stream (and, gathered, into its whole response).

    parser = ReplyParser(adapter, tool_use, thinking)
    for piece in engine deltas:  events = parser.feed(piece)
    events = parser.finish()     # then parser.reply() is the whole reply

Tool-call arguments come out as the model writes them: ToolCallStart (id and name, once, first),
ToolArgumentsDelta pieces whose concatenation is exactly ToolCallEnd.arguments."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from inference.adapters import FamilyAdapter
from inference.adapters.reasoning import ReasoningSplitter, partial_suffix
from inference.adapters.streaming_calls import CallEvent, CallScanner
from inference.serving.thinking import Thinking
from inference.serving.tooluse import ToolUse


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ToolCallStart:
    index: int
    id: str
    name: str


@dataclass(frozen=True)
class ToolArgumentsDelta:
    index: int
    text: str


@dataclass(frozen=True)
class ToolCallEnd:
    index: int
    id: str
    name: str
    arguments: str  # the JSON object text, exactly the concatenation of the deltas
    valid: bool  # the arguments parsed as a JSON object (a cut-off call does not)


ReplyEvent = ReasoningDelta | TextDelta | ToolCallStart | ToolArgumentsDelta | ToolCallEnd


@dataclass(frozen=True)
class ParsedToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Reply:
    reasoning: str | None
    content: str | None
    tool_calls: list[ParsedToolCall]


def call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


class _ToolSplitter:
    """Text until a tool call starts (a family's marker, or a reply opening the way its calls
    do), then calls; text that only looked like a call is released as text at the end."""

    def __init__(self, adapter: FamilyAdapter, tool_use: ToolUse) -> None:
        self._mode = tool_use.mode
        self._forced = tool_use.forced
        self._markers = tuple(m for m in adapter.tool_call_markers if m)
        self._opens_with = adapter.tool_call_opens_with
        self._scanner = CallScanner()
        self._held = ""  # text that may be the start of a marker
        self._raw_calls = ""  # everything since the marker, for a false alarm
        self._in_calls = self._mode == "required"
        self._opening_decided = False
        self._forced_open = False  # a forced call's start was sent

    def feed(self, text: str) -> tuple[str, list[CallEvent]]:
        if self._mode == "none":
            return text, []
        if self._mode == "forced":
            return "", self._forced_arguments(text)
        if self._in_calls:
            self._raw_calls += text
            return "", self._scanner.feed(text)
        self._held += text
        if not self._opening_decided and self._opens_with:
            head = self._held.lstrip()
            if not head or (self._opens_with.startswith(head) and head != self._opens_with):
                return "", []  # cannot tell yet
            self._opening_decided = True
            if head.startswith(self._opens_with):
                return self._enter_calls("", self._held)
        return self._find_marker()

    def _find_marker(self) -> tuple[str, list[CallEvent]]:
        hits = [(i, m) for m in self._markers if (i := self._held.find(m)) >= 0]
        if hits:
            found, marker = min(hits)
            return self._enter_calls(self._held[:found], self._held[found + len(marker) :])
        keep = max((partial_suffix(self._held, m) for m in self._markers), default=0)
        cut = len(self._held) - keep
        released, self._held = self._held[:cut], self._held[cut:]
        return released, []

    def _enter_calls(self, before: str, rest: str) -> tuple[str, list[CallEvent]]:
        self._raw_calls = self._held[len(before) :]
        self._held = ""
        self._in_calls = True
        return before, self._scanner.feed(rest)

    def _forced_arguments(self, text: str) -> list[CallEvent]:
        """A forced call's whole reply is its arguments (the grammar makes it so)."""
        name = self._forced or ""
        events = [] if self._forced_open else [CallEvent("start", 0, name)]
        self._forced_open = True
        self._raw_calls += text
        if text:
            events.append(CallEvent("arguments", 0, name, text))
        return events

    def finish(self) -> tuple[str, list[CallEvent]]:
        if self._mode == "forced":
            events = self._forced_arguments("" if self._raw_calls else "{}")
            valid = isinstance(_json_object(self._raw_calls), dict)
            end = CallEvent("end", 0, self._forced or "", self._raw_calls, valid)
            return "", [*events, end]
        if not self._in_calls:
            held, self._held = self._held, ""
            return held, []
        events = self._scanner.finish()
        if not self._scanner.started_any:
            return self._raw_calls, []  # it looked like a call but never named one
        return "", events


def _json_object(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return None


class ReplyParser:
    def __init__(
        self,
        adapter: FamilyAdapter,
        tool_use: ToolUse | None = None,
        thinking: Thinking | None = None,
    ) -> None:
        self._thinking = (
            ReasoningSplitter(thinking.start, thinking.end, thinking.opened) if thinking else None
        )
        self._tools = _ToolSplitter(adapter, tool_use or ToolUse())
        self._parallel = tool_use.parallel if tool_use else True
        self._ids: dict[int, str] = {}
        self._reasoning: list[str] = []
        self._content: list[str] = []
        self._calls: list[ParsedToolCall] = []

    def feed(self, text: str) -> list[ReplyEvent]:
        parts = self._thinking.feed(text) if self._thinking else [("content", text)]
        return self._events(parts, final=False)

    def finish(self) -> list[ReplyEvent]:
        events = self._events(self._thinking.finish() if self._thinking else [], final=False)
        return events + self._events([], final=True)

    def reply(self) -> Reply:
        """The whole reply, once finish() was called."""
        content = "".join(self._content)
        if self._calls:
            content = content.strip()
        return Reply("".join(self._reasoning) or None, content or None, list(self._calls))

    def _events(self, parts: list, final: bool) -> list[ReplyEvent]:
        events: list[ReplyEvent] = []
        for kind, piece in parts:
            if kind == "reasoning":
                self._reasoning.append(piece)
                events.append(ReasoningDelta(piece))
            else:
                events.extend(self._split(*self._tools.feed(piece)))
        if final:
            events.extend(self._split(*self._tools.finish()))
        return events

    def _split(self, text: str, calls: list[CallEvent]) -> list[ReplyEvent]:
        events: list[ReplyEvent] = []
        if text:
            self._content.append(text)
            events.append(TextDelta(text))
        for call in calls:
            if call.index > 0 and not self._parallel:
                continue
            events.append(self._call_event(call))
        return events

    def _call_event(self, call: CallEvent) -> ReplyEvent:
        if call.kind == "start":
            self._ids[call.index] = call_id()
            return ToolCallStart(call.index, self._ids[call.index], call.name)
        if call.kind == "arguments":
            return ToolArgumentsDelta(call.index, call.text)
        self._calls.append(ParsedToolCall(self._ids[call.index], call.name, call.text))
        return ToolCallEnd(call.index, self._ids[call.index], call.name, call.text, call.valid)


def parse_reply(
    adapter: FamilyAdapter,
    text: str,
    tool_use: ToolUse | None = None,
    thinking: Thinking | None = None,
) -> Reply:
    """A whole reply at once (non-streaming responses): the same split a stream gets."""
    parser = ReplyParser(adapter, tool_use, thinking)
    parser.feed(text)
    parser.finish()
    return parser.reply()
