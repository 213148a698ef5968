"""Syntaxes whose calls are JSON objects naming a function and holding its arguments:

- tagged (Hermes, Qwen 2.5, SmolLM3): `<tool_call>{"name": "f", "arguments": {...}}</tool_call>`;
- bare JSON (Llama 3.x): `{"name": "f", "parameters": {...}}`, calls split by `;`;
- Mistral: `[TOOL_CALLS][{"name": "f", "arguments": {...}}]` or `[TOOL_CALLS]f[ARGS]{...}`.

One scanner serves them all: it follows the JSON character by character, reports the name as
soon as its string closes, and hands on the arguments' own text as it arrives, so clients see
arguments stream. Each syntax is a class only for its markers and the grammar of its calls."""

from __future__ import annotations

import json
from typing import Literal

from inference.adapters.toolcalls.base import (
    CallEvent,
    Function,
    ToolSyntax,
    decode_json,
    json_rule,
    lit,
)
from inference.adapters.toolcalls.json_scan import JSONScan

ARGUMENT_KEYS = ("arguments", "parameters")
MISTRAL_ARGS = "[ARGS]"
MISTRAL_CALLS = "[TOOL_CALLS]"


class _Call:
    """One JSON object being read: its name, and its arguments' text."""

    def __init__(self, index: int, name: str | None) -> None:
        self.index = index
        self.name = name
        self.args_only = name is not None  # the whole object is the arguments (Mistral [ARGS])
        self.arguments = ""
        self.sent = 0  # how much of the arguments has been handed on
        self.started = False
        self.string_arguments = False  # "arguments": "{...}" — handed on whole, decoded
        self.scan = JSONScan()
        self.key: str | None = None
        self.expect: Literal["key", "colon", "value", "next"] = "key"
        self.capture: Literal["key", "name", "arguments"] | None = None
        self.buffer = ""

    @property
    def depth(self) -> int:
        return self.scan.depth


class CallScanner:
    def __init__(self, name_keys: tuple[str, ...] = ("name",)) -> None:
        self._name_keys = name_keys  # Command R names the function "tool_name"
        self._call: _Call | None = None
        self._outside = ""  # text between objects: separators, closing tags, Mistral names
        self._count = 0

    @property
    def started_any(self) -> bool:
        return self._count > 0

    def feed(self, text: str) -> list[CallEvent]:
        events: list[CallEvent] = []
        for char in text:
            if self._call is None:
                if char == "{":
                    self._open()
                else:
                    self._outside += char
                    continue
            self._step(self._call, char, events)  # type: ignore[arg-type]
        if self._call is not None:
            self._hand_on(self._call, events)
        return events

    def finish(self) -> list[CallEvent]:
        """A call cut off midway (max_tokens) ends with the arguments it has."""
        events: list[CallEvent] = []
        if self._call is not None and self._call.name is not None:
            self._end(self._call, events)
        self._call = None
        return events

    def _open(self) -> None:
        name = None
        if MISTRAL_ARGS in self._outside:
            name = self._outside.split(MISTRAL_ARGS)[0].replace(MISTRAL_CALLS, "").strip()
        self._outside = ""
        self._call = _Call(self._count, name or None)

    def _step(self, call: _Call, char: str, events: list[CallEvent]) -> None:
        if call.capture == "arguments" or call.args_only:
            call.arguments += char
        kind = call.scan.step(char)
        if kind == "text":
            if call.capture in ("key", "name"):
                call.buffer += char
        elif kind == "string_end":
            self._string_ends(call)
        elif kind == "string_start":
            if call.args_only:
                return  # its keys are the arguments' own
            if call.depth == 1 and call.expect == "key":
                call.capture, call.buffer = "key", ""
            elif call.depth == 1 and call.expect == "value" and call.key in self._name_keys:
                call.capture, call.buffer = "name", ""
            self._value_starts(call, char)
        elif kind == "open":
            self._value_starts(call, char)
        elif kind == "close":
            if call.depth == 1 and call.capture == "arguments":
                call.capture, call.expect = None, "next"
            elif call.depth == 0:
                self._close(call, events)
        elif call.depth == 1 and not call.args_only:
            self._separator(call, char)

    def _value_starts(self, call: _Call, char: str) -> None:
        # The depth the value starts at: an opening bracket was counted already.
        if call.depth - (char in "{[") == 1 and call.expect == "value":
            call.expect = "next"
            if call.key in ARGUMENT_KEYS and not call.args_only and not call.arguments:
                call.capture, call.arguments = "arguments", char
                call.string_arguments = char == '"'

    def _string_ends(self, call: _Call) -> None:
        if call.capture == "key":
            call.key, call.expect, call.capture = _decode(call.buffer), "colon", None
        elif call.capture == "name":
            call.name, call.capture = _decode(call.buffer), None
        elif call.capture == "arguments" and call.depth == 1:
            call.capture = None  # a string value ends at its quote

    def _separator(self, call: _Call, char: str) -> None:
        if char == ":" and call.expect == "colon":
            call.expect = "value"
        elif char == ",":
            if call.capture == "arguments":  # a bare scalar for arguments ends here
                call.arguments, call.capture = call.arguments[:-1], None
            call.expect = "key"
        elif not char.isspace() and call.expect == "value":
            self._value_starts(call, char)  # a scalar value

    def _close(self, call: _Call, events: list[CallEvent]) -> None:
        if call.capture == "arguments":  # a bare scalar ended by the object's close
            call.arguments = call.arguments[:-1]
        if call.name is not None:
            self._end(call, events)
        self._call = None

    def _hand_on(self, call: _Call, events: list[CallEvent]) -> None:
        if call.name is None:
            return  # nothing can be said before the name is known
        if not call.started:
            call.started = True
            self._count += 1
            events.append(CallEvent("start", call.index, call.name))
        if call.string_arguments:
            return
        piece = call.arguments[call.sent :]
        if piece:
            call.sent = len(call.arguments)
            events.append(CallEvent("arguments", call.index, call.name, piece))

    def _end(self, call: _Call, events: list[CallEvent]) -> None:
        if call.string_arguments:
            decoded = decode_json(call.arguments)
            call.arguments = decoded if isinstance(decoded, str) else call.arguments
            call.string_arguments = False
        if not call.arguments.strip():
            call.arguments = "{}"
        self._hand_on(call, events)
        valid = isinstance(decode_json(call.arguments), dict)
        events.append(CallEvent("end", call.index, call.name or "", call.arguments, valid))


def _decode(raw: str) -> str:
    value = decode_json(f'"{raw}"')
    return value if isinstance(value, str) else raw


class JSONCallSyntax(ToolSyntax):
    """The JSON scanner behind a family's markers."""

    name_keys: tuple[str, ...] = ("name",)  # the first is the one a forced call writes
    arguments_key = "arguments"
    # Around each forced call's JSON object (Hermes's tags).
    call_open = ""
    call_close = ""

    def __init__(self, schemas: dict[str, dict] | None = None) -> None:
        super().__init__(schemas)
        self._scanner = CallScanner(self.name_keys)

    @property
    def started_any(self) -> bool:
        return self._scanner.started_any

    def feed(self, text: str) -> list[CallEvent]:
        return self._scanner.feed(text)

    def finish(self) -> list[CallEvent]:
        return self._scanner.finish()

    def call_rule(self, function: Function) -> str:
        name = json.dumps(function.name)
        head = f'{self.call_open}{{"{self.name_keys[0]}": {name}, "{self.arguments_key}": '
        return f"{lit(head)} {json_rule(function.schema)} {lit('}' + self.call_close)}"


class HermesSyntax(JSONCallSyntax):
    name = "hermes"
    label = 'Hermes JSON: <tool_call>{"name": …, "arguments": {…}}</tool_call>'
    markers = ("<tool_call>",)
    call_open = "<tool_call>\n"
    call_close = "\n</tool_call>"


class Llama3Syntax(JSONCallSyntax):
    name = "llama3_json"
    label = 'Llama 3 JSON: {"name": …, "parameters": {…}}'
    # Llama fine-tunes that learned Hermes write its tag.
    markers = ("<|python_tag|>", "<tool_call>")
    opens_with = "{"
    call_separator = "; "
    arguments_key = "parameters"


class MistralSyntax(JSONCallSyntax):
    name = "mistral"
    label = "Mistral: [TOOL_CALLS]name[ARGS]{…} (and the older JSON list)"
    markers = ("[TOOL_CALLS]", "<tool_call>")
    call_separator = ""

    def call_rule(self, function: Function) -> str:
        head = f"{MISTRAL_CALLS}{function.name}{MISTRAL_ARGS}"
        return f"{lit(head)} {json_rule(function.schema)}"
