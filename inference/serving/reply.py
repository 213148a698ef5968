"""A reply as the model writes it, split while it streams into reasoning, text and tool calls,
as events every dialect turns into its own stream (and, gathered, into its whole response).

    parser = ReplyParser(adapter, tool_use, thinking)
    for piece in engine deltas:  events = parser.feed(piece)
    events = parser.finish()     # then parser.reply() is the whole reply

Tool-call arguments come out as the model writes them: ToolCallStart (id and name, once, first),
ToolArgumentsDelta pieces whose concatenation is exactly ToolCallEnd.arguments."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from inference.adapters import FamilyAdapter
from inference.adapters.reasoning import partial_suffix
from inference.adapters.toolcalls import CallEvent
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
    """Text until a tool call starts (the syntax's marker, or a reply opening the way its calls
    do), then calls, read by the family's syntax; text that only looked like a call is released
    as text at the end. A forced or required reply is calls from its first character (its
    grammar writes them in the family's syntax)."""

    def __init__(self, adapter: FamilyAdapter, tool_use: ToolUse) -> None:
        self._mode = tool_use.mode
        self._forced = tool_use.forced if self._mode == "forced" else None
        self._syntax = adapter.tool_syntax(tool_use.schemas())
        self._markers = tuple(m for m in self._syntax.markers if m)
        self._opens_with = self._syntax.opens_with
        self._held = ""  # text that may be the start of a marker
        self._raw_calls = ""  # everything since the marker, for a false alarm
        self._in_calls = self._mode in ("required", "forced")
        self._opening_decided = False

    def feed(self, text: str) -> tuple[str, list[CallEvent]]:
        if self._mode == "none":
            return text, []
        if self._in_calls:
            return "", self.feed_calls(text)
        self._held += text
        if not self._opening_decided and self._opens_with:
            head = self._held.lstrip()
            if not head or (self._opens_with.startswith(head) and head != self._opens_with):
                return "", []  # cannot tell yet
            self._opening_decided = True
            if head.startswith(self._opens_with):
                return self._enter_calls("", self._held)
        return self._find_marker()

    def feed_calls(self, text: str) -> list[CallEvent]:
        """Text known to be calls (a forced reply, a family's framing that says so)."""
        if self._mode == "none":
            return []  # calls nobody offered (a family's framing made them): not reported
        self._in_calls = True
        self._raw_calls += text
        return self._syntax.feed(text)

    def _find_marker(self) -> tuple[str, list[CallEvent]]:
        hits = [(i, m) for m in self._markers if (i := self._held.find(m)) >= 0]
        if hits:
            found, _ = min(hits)
            return self._enter_calls(self._held[:found], self._held[found:])
        keep = max((partial_suffix(self._held, m) for m in self._markers), default=0)
        cut = len(self._held) - keep
        released, self._held = self._held[:cut], self._held[cut:]
        return released, []

    def _enter_calls(self, before: str, rest: str) -> tuple[str, list[CallEvent]]:
        self._held = ""
        return before, self.feed_calls(rest)

    def finish(self) -> tuple[str, list[CallEvent]]:
        if not self._in_calls:
            held, self._held = self._held, ""
            return held, []
        events = self._syntax.finish()
        if not self._syntax.started_any:
            if self._forced:  # cut off before its name (max_tokens): the forced call, empty
                start = CallEvent("start", 0, self._forced)
                return "", [start, CallEvent("end", 0, self._forced, "{}", valid=False)]
            return self._raw_calls, []  # it looked like a call but never named one
        return "", events


class ReplyParser:
    def __init__(
        self,
        adapter: FamilyAdapter,
        tool_use: ToolUse | None = None,
        thinking: Thinking | None = None,
    ) -> None:
        self._reader = adapter.reply_reader(thinking)
        self._tools = _ToolSplitter(adapter, tool_use or ToolUse())
        self._parallel = tool_use.parallel if tool_use else True
        self._ids: dict[int, str] = {}
        self._reasoning: list[str] = []
        self._content: list[str] = []
        self._calls: list[ParsedToolCall] = []

    def feed(self, text: str) -> list[ReplyEvent]:
        parts = self._reader.feed(text) if self._reader else [("content", text)]
        return self._events(parts, final=False)

    def finish(self) -> list[ReplyEvent]:
        events = self._events(self._reader.finish() if self._reader else [], final=False)
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
            elif kind == "calls":
                events.extend(self._split("", self._tools.feed_calls(piece)))
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
