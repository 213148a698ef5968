"""Gemma 4's tool calls: `<|tool_call>call:NAME{key:VALUE,…}<tool_call|>`, one block per call.

Values are written as the template's `format_argument` writes them: a string between `<|"|>`
quotes (no escaping inside), numbers, true/false/null bare, lists `[a,b]`, and objects
`{key:value}` with bare (or `<|"|>`-quoted) keys. Read into JSON typed as written: a quoted
value is a string, streamed as it arrives; any other value is written when it ends."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

from inference.adapters.toolcalls.arguments import typed_value
from inference.adapters.toolcalls.base import Function, json_rule, lit, text_until
from inference.adapters.toolcalls.marked import (
    MarkedCalls,
    ordered_arguments,
)

CALL_BEGIN = "<|tool_call>"
CALL_END = "<tool_call|>"
QUOTE = '<|"|>'
_SCALAR = re.compile(r"[^,\]}]*")


def gemma_value(text: str) -> object:
    """The value Gemma's argument syntax writes as `text` (ValueError when it is not one)."""
    value, rest = _parse(text)
    if rest.strip():
        raise ValueError(f"trailing text: {rest[:20]!r}")
    return value


def _parse(text: str) -> tuple[object, str]:
    text = text.lstrip()
    if text.startswith(QUOTE):
        end = text.find(QUOTE, len(QUOTE))
        if end < 0:
            raise ValueError("unclosed string")
        return text[len(QUOTE) : end], text[end + len(QUOTE) :]
    if text.startswith("{"):
        return _parse_object(text[1:])
    if text.startswith("["):
        return _parse_list(text[1:])
    token = _SCALAR.match(text).group(0)  # type: ignore[union-attr]
    value = json.loads(token.strip())  # numbers, true, false, null (ValueError otherwise)
    return value, text[len(token) :]


def _parse_object(text: str) -> tuple[object, str]:
    result: dict[str, object] = {}
    text = text.lstrip()
    while not text.startswith("}"):
        if text.startswith(QUOTE):
            key, text = _parse(text)
            text = text.lstrip().removeprefix(":")
        else:
            key, colon, text = text.partition(":")
            if not colon:
                raise ValueError("key without a value")
        result[str(key).strip()], text = _parse(text)
        text = _after_item(text, "}")
    return result, text[1:]


def _parse_list(text: str) -> tuple[object, str]:
    result: list[object] = []
    text = text.lstrip()
    while not text.startswith("]"):
        item, text = _parse(text)
        result.append(item)
        text = _after_item(text, "]")
    return result, text[1:]


def _after_item(text: str, close: str) -> str:
    text = text.lstrip()
    if text.startswith(","):
        return text[1:].lstrip()
    if text.startswith(close):
        return text
    raise ValueError(f"expected , or {close}")


def value_end(text: str) -> int | None:
    """Where a non-string value at the start of `text` ends (at the `,` or `}` after it);
    None while it has not ended."""
    depth, i = 0, 0
    while i < len(text):
        if text.startswith(QUOTE, i):
            end = text.find(QUOTE, i + len(QUOTE))
            if end < 0:
                return None
            i = end + len(QUOTE)
            continue
        char = text[i]
        if char in "[{":
            depth += 1
        elif char in "]}":
            if depth == 0:
                return i
            depth -= 1
        elif char == "," and depth == 0:
            return i
        i += 1
    return None


class Gemma4Syntax(MarkedCalls):
    name = "gemma4"
    label = "Gemma 4: <|tool_call>call:name{…}<tool_call|>"
    markers = (CALL_BEGIN,)
    call_separator = ""

    def __init__(self, schemas: Mapping[str, dict] | None = None) -> None:
        super().__init__(schemas)
        self._opened = False
        self._key = ""

    def _between(self) -> bool:
        found = self._skip_to(CALL_BEGIN) is not None
        if found:
            self._state = "head"
        return found

    def _head(self) -> bool:
        head = self._until("{")
        if head is None:
            return False
        self._start(head.strip().removeprefix("call:").strip())
        self._opened, self._state = False, "keys"
        return True

    def _keys(self) -> bool:
        self._buf = self._buf.lstrip().removeprefix(",").lstrip()
        if self._buf.startswith("}"):
            self._buf = self._buf[1:]
            self._args("}" if self._opened else "{}")
            self._end()
            self._state = "between"
            return True
        key = self._until(":")
        if key is None:
            return False
        self._key = key.strip().removeprefix(QUOTE).removesuffix(QUOTE)
        head = ", " if self._opened else "{"
        self._opened = True
        self._args(f"{head}{json.dumps(self._key, ensure_ascii=False)}: ")
        self._state = "value_start"
        return True

    def _value_start(self) -> bool:
        self._buf = self._buf.lstrip()
        if not self._buf or (QUOTE.startswith(self._buf) and self._buf != QUOTE):
            return False  # cannot tell yet
        if self._buf.startswith(QUOTE):
            self._buf = self._buf[len(QUOTE) :]
            self._args('"')
            self._state = "string"
        else:
            self._state = "held"
        return True

    def _string(self) -> bool:
        text, ended = self._stream_to(QUOTE)
        self._args(json.dumps(text, ensure_ascii=False)[1:-1])
        if ended:
            self._args('"')
            self._state = "keys"
        return ended

    def _held(self) -> bool:
        end = value_end(self._buf)
        if end is None:
            return False
        raw, self._buf = self._buf[:end], self._buf[end:]
        self._args(self._typed(raw))
        self._state = "keys"
        return True

    def _typed(self, raw: str) -> str:
        try:
            value = gemma_value(raw)
        except (ValueError, AttributeError):
            schema = (self.schemas.get(self._name or "") or {}).get("properties") or {}
            value = typed_value(raw, schema.get(self._key))
        return json.dumps(value, ensure_ascii=False)

    def _cut_off(self) -> None:
        if self._state == "string":
            self._args('"')
        elif self._state == "held" and self._buf.strip():
            self._args(self._typed(self._buf))
        if self._state != "head":
            self._args("}" if self._opened else "{}")
        self._end(valid=False)

    # --- the grammar of a forced call

    def call_rule(self, function: Function) -> str:
        properties = function.schema.get("properties") or {}
        required = set(function.schema.get("required") or [])
        # The template writes arguments sorted by key (dictsort).
        args = [
            (f"{lit(k + ':')} {gemma_rule(properties[k])}", k in required)
            for k in sorted(properties)
        ]
        head = lit(f"{CALL_BEGIN}call:{function.name}{{")
        return f"{head} {ordered_arguments(args, ',')} {lit('}' + CALL_END)}"

    def grammar(self, functions: Sequence[Function], parallel: bool) -> str:
        return super().grammar(functions, parallel) + "\n" + GENERIC_VALUE


def gemma_rule(schema: object) -> str:
    """Lark for one value of `schema` as Gemma writes it."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "string" and isinstance(schema, dict) and "enum" in schema:
        return "(" + " | ".join(lit(f"{QUOTE}{v}{QUOTE}") for v in schema["enum"]) + ")"
    if kind == "string":
        return f"{lit(QUOTE)} GEMMA_STRING_REST"
    if kind in ("integer", "number"):
        return json_rule(schema)  # type: ignore[arg-type]
    if kind == "boolean":
        return '("true" | "false")'
    if kind == "null":
        return '"null"'
    return "gemma_value"


GENERIC_VALUE = "\n".join(
    [
        "gemma_value: gemma_string | gemma_object | gemma_list | GEMMA_NUMBER"
        ' | "true" | "false" | "null"',
        f"gemma_string: {lit(QUOTE)} GEMMA_STRING_REST",
        text_until("GEMMA_STRING_REST", QUOTE),  # a string's text and its closing quote
        'gemma_object: "{" (gemma_pair ("," gemma_pair)*)? "}"',
        'gemma_pair: /[A-Za-z_][A-Za-z0-9_]*/ ":" gemma_value',
        'gemma_list: "[" (gemma_value ("," gemma_value)*)? "]"',
        r"GEMMA_NUMBER: /-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/",
    ]
)
