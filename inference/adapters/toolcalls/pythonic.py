"""Pythonic tool calls (Llama 3.2 / 4 pythonic fine-tunes, LFM2): a Python list of calls with
keyword arguments, `[get_weather(city="Paris", days=3), now()]`, the whole reply or after
Llama 4's `<|python_start|>` / LFM2's `<|tool_call_start|>`.

Read character by character: a call starts once `name(` is read (a name an offered function
has, when functions were offered); a string argument streams as it arrives, any other value is
written when it ends, as JSON of the Python literal (typed as written: `3` stays a number, `'3'`
a string). A reply that opens with `[` but is no call list (`[1, 2]`, `[a link](…)`) starts
no call, so the reply splitter releases it as text."""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping

from inference.adapters.toolcalls.base import (
    CallEvent,
    Function,
    ToolSyntax,
    decode_json,
    json_rule,
    lit,
)
from inference.adapters.toolcalls.marked import ordered_arguments, schema_order

MARKERS = ("<|python_start|>", "<|tool_call_start|>")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "b": "\b", "f": "\f", "v": "\v"}
_HEX = {"x": 2, "u": 4, "U": 8}


class _StringReader:
    """A Python string literal's body, decoded as it arrives (escapes included)."""

    def __init__(self, quote: str) -> None:
        self.quote = quote
        self.escape = ""  # an escape sequence read so far, its backslash first
        self.closed = False

    def take(self, char: str) -> str:
        """The decoded text `char` completes ('' while an escape is unfinished)."""
        if self.escape:
            return self._escaped(char)
        if char == "\\":
            self.escape = "\\"
            return ""
        if char == self.quote:
            self.closed = True
            return ""
        return char

    def _escaped(self, char: str) -> str:
        self.escape += char
        kind = self.escape[1]
        if kind in _HEX:
            if len(self.escape) < 2 + _HEX[kind]:
                return ""
            digits, self.escape = self.escape[2:], ""
            try:
                return chr(int(digits, 16))
            except ValueError:
                return "\\" + kind + digits
        self.escape = ""
        if kind == "\n":
            return ""  # a line continuation
        return _ESCAPES.get(kind, kind if kind in "\\'\"" else "\\" + kind)


def python_value(raw: str) -> object:
    """A Python (or JSON) literal's value; text that is neither stays a string."""
    text = raw.strip()
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    value = decode_json(text)
    return value if value is not None or text == "null" else text


def _jsonable(value: object) -> object:
    """Tuples and sets as lists, keys as strings: what json.dumps can write."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (bytes, complex)):
        return str(value)
    return value


class PythonicSyntax(ToolSyntax):
    name = "pythonic"
    label = "Pythonic: [get_weather(city='Paris')]"
    markers = MARKERS
    opens_with = "["
    call_separator = ", "
    calls_prefix = "["
    calls_suffix = "]"

    def __init__(self, schemas: Mapping[str, dict] | None = None) -> None:
        super().__init__(schemas)
        self._state = "before"
        self._word = ""  # the marker before the list, or a name / key being read
        self._count = 0
        self._call: str | None = None  # the call in progress
        self._pending: str | None = None  # a name( read, its start not yet reported
        self._sent = ""
        self._opened = False  # its arguments object has a key
        self._string = _StringReader('"')
        self._raw = ""  # a non-string value so far
        self._nesting = ""  # brackets open in it
        self._quote = ""  # the quote of a string inside it
        self._events: list[CallEvent] = []

    @property
    def started_any(self) -> bool:
        return self._count > 0

    def feed(self, text: str) -> list[CallEvent]:
        self._events = []
        for char in text:
            if self._state in ("dead", "closed"):
                break
            getattr(self, f"_on_{self._state}")(char)
        return self._events

    def finish(self) -> list[CallEvent]:
        """A call cut off midway ends with the arguments it has, closed, and invalid."""
        self._events = []
        if self._call is not None or self._pending is not None:
            if self._state == "string":
                self._args('"')
            elif self._state == "value" and self._raw.strip():
                self._args(self._typed(self._raw))
            self._end(valid=False)
        return self._events

    # --- the list and its calls

    def _on_before(self, char: str) -> None:
        if char == "[":
            self._state, self._word = "name", ""
            return
        self._word += char
        if not any(m.startswith(self._word.strip()) for m in MARKERS):
            self._state = "dead"  # neither a marker nor the list

    def _on_name(self, char: str) -> None:
        if char.isalnum() or char in "_.":
            self._word += char
        elif char == "(" and self._known(self._word):
            # Started at its first keyword (or its close): `[now(1)]` is not a call.
            self._pending, self._opened = self._word, False
            self._state = "arguments"
        elif not (char.isspace() and not self._word):
            self._die()

    def _known(self, name: str) -> bool:
        shaped = name.replace(".", "_").isidentifier()
        return shaped and (not self.schemas or name in self.schemas)

    def _on_after_call(self, char: str) -> None:
        if char == ",":
            self._state, self._word = "name", ""
        elif char == "]":
            self._state = "closed"
        elif not char.isspace():
            self._die()

    # --- keyword arguments

    def _on_arguments(self, char: str) -> None:
        if char == ")":
            self._end(valid=True)
        elif char.isalpha() or char == "_":
            self._state, self._word = "key", char
        elif not char.isspace():
            self._die()

    def _on_key(self, char: str) -> None:
        if (char.isalnum() or char == "_") and not self._word.endswith(" "):
            self._word += char
        elif char == "=":
            head = ", " if self._opened else "{"
            self._opened = True
            self._args(f"{head}{json.dumps(self._word.strip(), ensure_ascii=False)}: ")
            self._state = "value_start"
        elif char.isspace():
            self._word = self._word.rstrip() + " "
        else:
            self._die()

    def _on_value_start(self, char: str) -> None:
        if char in "'\"":
            self._string = _StringReader(char)
            self._args('"')
            self._state = "string"
        elif not char.isspace():
            self._raw, self._nesting, self._quote = "", "", ""
            self._state = "value"
            self._on_value(char)

    def _on_string(self, char: str) -> None:
        text = self._string.take(char)
        if text:
            self._args(json.dumps(text, ensure_ascii=False)[1:-1])
        if self._string.closed:
            self._args('"')
            self._state = "after_value"

    def _on_value(self, char: str) -> None:
        if self._quote:
            self._raw += char
            body = self._raw[:-1]
            if char == self._quote and (len(body) - len(body.rstrip("\\"))) % 2 == 0:
                self._quote = ""
            return
        if not self._nesting and char in ",)":
            self._args(self._typed(self._raw))
            self._state = "after_value"
            self._on_after_value(char)
            return
        self._raw += char
        if char in "'\"":
            self._quote = char
        elif char in "([{":
            self._nesting += char
        elif char in ")]}" and self._nesting:
            self._nesting = self._nesting[:-1]

    def _on_after_value(self, char: str) -> None:
        if char == ",":
            self._state = "arguments"
        elif char == ")":
            self._end(valid=True)
        elif not char.isspace():
            self._die()

    @staticmethod
    def _typed(raw: str) -> str:
        return json.dumps(_jsonable(python_value(raw)), ensure_ascii=False)

    # --- events

    def _start(self, name: str) -> None:
        self._call, self._sent, self._pending = name, "", None
        self._events.append(CallEvent("start", self._count, name))
        self._count += 1

    def _args(self, piece: str) -> None:
        if self._pending is not None:
            self._start(self._pending)
        if self._call is not None and piece:
            self._sent += piece
            self._events.append(CallEvent("arguments", self._count - 1, self._call, piece))

    def _end(self, valid: bool) -> None:
        self._args("}" if self._opened else "{}")
        whole = isinstance(decode_json(self._sent), dict)
        name, self._call = self._call or "", None
        self._events.append(CallEvent("end", self._count - 1, name, self._sent, valid and whole))
        self._state = "after_call"

    def _die(self) -> None:
        """Not a call list after all: a call in progress ends as it is; nothing more is read."""
        if self._call is not None:
            self._end(valid=False)
        self._pending, self._state = None, "dead"

    # --- the grammar of a forced call

    def call_rule(self, function: Function) -> str:
        properties = function.schema.get("properties") or {}
        args = [
            (f"{lit(k + '=')} {python_rule(properties[k])}", required)
            for k, required in schema_order(function.schema)
        ]
        return f"{lit(function.name + '(')} {ordered_arguments(args, ', ')} {lit(')')}"


def python_rule(schema: object) -> str:
    """Lark for a Python literal of `schema`'s type: JSON for strings and numbers (a JSON
    string is a Python string), Python's True/False/None, JSON for anything else."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "boolean":
        return '("True" | "False")'
    if kind == "null":
        return '"None"'
    return json_rule(schema if isinstance(schema, dict) else {})
