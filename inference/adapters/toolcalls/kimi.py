"""Kimi's tool calls:

- K2 / K2-Thinking: `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0
  <|tool_call_argument_begin|>{JSON}<|tool_call_end|>…<|tool_calls_section_end|>` (the
  section markers and the call's end may be missing: the JSON object closing ends a call);
- K3 (XTML): `<|open|>tools<|sep|><|open|>call tool="NAME" index="1"<|sep|>` then per argument
  `<|open|>argument key="k" type="string"<|sep|>V<|close|>argument<|sep|>` (or one
  `<|open|>json type="object"<|sep|>{JSON}<|close|>json<|sep|>`), `<|close|>call<|sep|>`."""

from __future__ import annotations

import html
from collections.abc import Mapping

from inference.adapters.toolcalls.base import Function, json_rule, lit
from inference.adapters.toolcalls.marked import (
    JSONValue,
    MarkedCalls,
    TaggedArguments,
    attributes,
)

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARGUMENTS_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
# K3's tags: <|open|>tag attrs<|sep|> … <|close|>tag<|sep|>
SEP = "<|sep|>"
K3_TOOLS = "<|open|>tools<|sep|>"
K3_CALL = "<|open|>call"
K3_ARGUMENT = "<|open|>argument"
K3_JSON = "<|open|>json"
K3_ARGUMENT_END = "<|close|>argument<|sep|>"
K3_CALL_END = "<|close|>call<|sep|>"


def name_of(call_id: str) -> str:
    """`functions.get_weather:0` -> `get_weather` (the prefix and the index may be absent)."""
    name = call_id.strip().removeprefix("functions.")
    head, colon, index = name.rpartition(":")
    return head if colon and index.isdigit() else name


class KimiSyntax(MarkedCalls):
    name = "kimi"
    label = "Kimi K2: <|tool_calls_section_begin|>functions.name:0… (K3's XTML read too)"
    markers = (SECTION_BEGIN, CALL_BEGIN, K3_TOOLS)
    call_separator = ""
    calls_prefix = SECTION_BEGIN
    calls_suffix = SECTION_END

    def __init__(self, schemas: Mapping[str, dict] | None = None) -> None:
        super().__init__(schemas)
        self._json = JSONValue()
        self._writer = TaggedArguments(None)

    def _between(self) -> bool:
        marker = self._skip_to(CALL_BEGIN, K3_CALL)
        if marker is not None:
            self._state = "call_id" if marker == CALL_BEGIN else "k3_call"
        return marker is not None

    def _call_id(self) -> bool:
        call_id = self._until(ARGUMENTS_BEGIN)
        if call_id is None:
            return False
        self._start(name_of(call_id))
        self._json, self._state = JSONValue(), "arguments"
        return True

    def _k3_call(self) -> bool:
        head = self._until(SEP)
        if head is None:
            return False
        self._start(html.unescape(attributes(head).get("tool", "")))
        self._writer = TaggedArguments(self.schemas.get(self._name or ""))
        self._state = "k3_params"
        return True

    def _k3_params(self) -> bool:
        marker = self._skip_to(K3_ARGUMENT, K3_JSON, K3_CALL_END)
        if marker == K3_CALL_END:
            self._args(self._writer.close())
            self._end()
            self._state = "between"
        elif marker is not None:
            self._state = "k3_arg_head" if marker == K3_ARGUMENT else "k3_json_head"
        return marker is not None

    def _k3_arg_head(self) -> bool:
        head = self._until(SEP)
        if head is None:
            return False
        found = attributes(head)
        key = html.unescape(found.get("key", ""))
        self._args(self._writer.key(key, found.get("type") == "string"))
        self._state = "k3_value"
        return True

    def _k3_value(self) -> bool:
        return self._tagged_value(K3_ARGUMENT_END, "k3_params")

    def _k3_json_head(self) -> bool:
        """A call written as one JSON object: the arguments, as they are."""
        if self._until(SEP) is None:
            return False
        self._json, self._state = JSONValue(), "arguments"
        return True

    def _cut_off(self) -> None:
        self._cut_off_tagged("k3_value", ("k3_params", "k3_arg_head", "k3_value"))

    def call_rule(self, function: Function) -> str:
        head = lit(f"{CALL_BEGIN}functions.{function.name}:")
        tail = f"{lit(ARGUMENTS_BEGIN)} {json_rule(function.schema)} {lit(CALL_END)}"
        return f"{head} /[0-9]+/ {tail}"
