"""What the marker syntaxes (DeepSeek, Kimi, Gemma 4, pythonic) share: `MarkedCalls`, a
buffer read by a state machine whose calls are reported as events; `JSONValue`, a JSON value
streamed as it arrives; `TaggedArguments`, arguments written from tagged key/value pairs; and
the lark helpers for values that run to a closing tag and for arguments in schema order."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from inference.adapters.reasoning import partial_suffix
from inference.adapters.toolcalls.arguments import typed_value
from inference.adapters.toolcalls.base import CallEvent, ToolSyntax, decode_json, lit
from inference.adapters.toolcalls.json_scan import JSONScan

_ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')


def attributes(text: str) -> dict[str, str]:
    """`name="get_weather" string="true"` as a dict."""
    return dict(_ATTRIBUTE.findall(text))


def ordered_arguments(args: list[tuple[str, bool]], separator: str) -> str:
    """Lark for arguments in the given order, each (expression, required): a required one
    always there, an optional one maybe, `separator` between those present."""
    sep = lit(separator) + " " if separator else ""

    def rest(i: int) -> str:  # after at least one argument
        if i == len(args):
            return ""
        expr, required = args[i]
        here = f"{sep}{expr}" if required else f"({sep}{expr})?"
        return f"{here} {rest(i + 1)}".strip()

    def first(i: int) -> str:  # none yet
        if i == len(args):
            return '""'
        expr, required = args[i]
        if required:
            return f"{expr} {rest(i + 1)}".strip()
        return f"(({expr} {rest(i + 1)}) | {first(i + 1)})"

    return first(0)


def schema_order(schema: dict) -> list[tuple[str, bool]]:
    """The parameters as a call writes them: the required ones, then the others."""
    properties = schema.get("properties") or {}
    required = [k for k in schema.get("required") or [] if k in properties]
    return [(k, True) for k in required] + [(k, False) for k in properties if k not in required]


class MarkedCalls(ToolSyntax):
    """Calls framed by markers, read from a buffer by a state machine (`_step`), reported as
    call events. A marker split over pieces waits in the buffer until it is whole."""

    def __init__(self, schemas: Mapping[str, dict] | None = None) -> None:
        super().__init__(schemas)
        self._buf = ""
        self._count = 0
        self._name: str | None = None  # the call in progress
        self._sent = ""  # its arguments handed on so far
        self._events: list[CallEvent] = []
        self._state = "between"

    @property
    def started_any(self) -> bool:
        return self._count > 0

    def feed(self, text: str) -> list[CallEvent]:
        self._buf += text
        self._events = []
        while self._step():
            pass
        return self._events

    def finish(self) -> list[CallEvent]:
        self._events = []
        if self._name is not None:
            self._cut_off()
        return self._events

    def _step(self) -> bool:
        """Read what the buffer holds in the current state (the subclass's `_<state>` method,
        from "between" calls on); False when it needs more text."""
        return getattr(self, f"_{self._state}")()

    def _cut_off(self) -> None:
        """The reply ended inside a call (max_tokens): end it with what it has."""
        self._end(valid=False)

    def _until(self, marker: str) -> str | None:
        """The text before `marker`, consumed with it; None while it has not arrived."""
        found = self._buf.find(marker)
        if found < 0:
            return None
        head, self._buf = self._buf[:found], self._buf[found + len(marker) :]
        return head

    def _skip_to(self, *markers: str) -> str | None:
        """Drop text up to the first of `markers` and consume it; which one (None: not yet,
        keeping only what may be a marker's start)."""
        hits = [(i, m) for m in markers if (i := self._buf.find(m)) >= 0]
        if not hits:
            keep = max(partial_suffix(self._buf, m) for m in markers)
            self._buf = self._buf[len(self._buf) - keep :]
            return None
        found, marker = min(hits)
        self._buf = self._buf[found + len(marker) :]
        return marker

    def _stream_to(self, marker: str) -> tuple[str, bool]:
        """Text before `marker` (all that cannot be its start when it has not come yet),
        consumed, and whether the marker came (consumed too)."""
        head = self._until(marker)
        if head is not None:
            return head, True
        cut = len(self._buf) - partial_suffix(self._buf, marker)
        text, self._buf = self._buf[:cut], self._buf[cut:]
        return text, False

    def _start(self, name: str) -> None:
        self._name, self._sent = name, ""
        self._events.append(CallEvent("start", self._count, name))
        self._count += 1

    def _args(self, piece: str) -> None:
        if piece and self._name is not None:
            self._sent += piece
            self._events.append(CallEvent("arguments", self._count - 1, self._name, piece))

    def _end(self, valid: bool | None = None) -> None:
        if not self._sent.strip():
            self._args("{}")
        whole = isinstance(decode_json(self._sent), dict)
        ok = whole if valid is None else valid and whole
        name, self._name = self._name or "", None
        self._events.append(CallEvent("end", self._count - 1, name, self._sent, ok))

    def _json_args(self) -> bool:
        """Stream a JSON arguments object; True once it closed (the call ended)."""
        if not self._json.begun:
            self._buf = self._buf.lstrip()
            if not self._buf:
                return False
        used = self._json.take(self._buf)
        piece, self._buf = self._buf[:used], self._buf[used:]
        self._args(piece)
        if self._json.done:
            self._end()
            return True
        return False

    def _arguments(self) -> bool:
        """The "arguments" state: a call's JSON object, then back between calls."""
        if self._json_args():
            self._state = "between"
            return True
        return False

    def _tagged_value(self, end: str, back: str) -> bool:
        """A tagged value streamed through the writer up to `end`, then the state `back`."""
        text, ended = self._stream_to(end)
        self._args(self._writer.piece(text))
        if ended:
            self._args(self._writer.end_value())
            self._state = back
        return ended

    def _cut_off_tagged(self, value_state: str, tagged_states: tuple[str, ...]) -> None:
        """A call cut off midway: a tagged one gets its open value and object closed."""
        if self._state in tagged_states:
            if self._state == value_state:
                self._args(self._writer.end_value())
            self._args(self._writer.close())
        self._end(valid=False)

    _json: JSONValue
    _writer: TaggedArguments


class JSONValue:
    """A JSON value's text as it arrives, and where it ends: its outermost bracket closing."""

    def __init__(self) -> None:
        self.scan = JSONScan()
        self.begun = False
        self.done = False

    def take(self, text: str) -> int:
        """How much of `text` belongs to the value (all of it unless the value ends inside)."""
        for i, char in enumerate(text):
            self.begun = True
            if self.scan.step(char) == "close" and self.scan.depth == 0:
                self.done = True
                return i + 1
        return len(text)


class TaggedArguments:
    """A JSON arguments object from values that say themselves whether they are strings
    (DSML's string="true", Kimi K3's type="string"): a string streams as written, anything
    else is JSON held until it ends (text that is not JSON is typed by the schema)."""

    def __init__(self, schema: object) -> None:
        properties = schema.get("properties") if isinstance(schema, dict) else None
        self._properties = properties if isinstance(properties, dict) else {}
        self._opened = False
        self._string = False
        self._key = ""
        self._raw = ""

    def key(self, name: str, string: bool) -> str:
        head = ", " if self._opened else "{"
        self._opened, self._string, self._key, self._raw = True, string, name, ""
        return f"{head}{json.dumps(name, ensure_ascii=False)}: " + ('"' if string else "")

    def piece(self, text: str) -> str:
        if self._string:
            return json.dumps(text, ensure_ascii=False)[1:-1]
        self._raw += text
        return ""

    def end_value(self) -> str:
        if self._string:
            return '"'
        raw, self._raw = self._raw.strip(), ""
        value = decode_json(raw)
        if value is None and raw != "null":
            value = typed_value(raw, self._properties.get(self._key))
        return json.dumps(value, ensure_ascii=False)

    def close(self) -> str:
        return "}" if self._opened else "{}"
