"""A tool-call syntax: how one family writes its calls, read back while they stream, and the
grammar that keeps a forced call in that same syntax.

    syntax = SomeSyntax(schemas)          # each offered function's parameters schema, by name
    events = syntax.feed(text)            # text from the first marker on, marker included
    events = syntax.finish()              # a call cut off midway ends with what it has

Every syntax reports the same events: a call's start (index, name) once its name is known,
its arguments as JSON text in pieces, and its end with the whole arguments. Syntaxes whose
values are not JSON (XML parameters, `arg_key`/`arg_value`, pythonic) write JSON as they read,
typed by the function's schema (arguments.py)."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal


@dataclass(frozen=True)
class CallEvent:
    kind: Literal["start", "arguments", "end"]
    index: int
    name: str = ""
    text: str = ""  # arguments piece ("arguments"), the whole arguments ("end")
    valid: bool = True  # "end": the arguments are a JSON object


@dataclass(frozen=True)
class Function:
    """An offered function as a grammar needs it: its name and (closed) parameters schema."""

    name: str
    schema: dict


class ToolSyntax(ABC):
    name: ClassVar[str]
    label: ClassVar[str]
    # Text after which a reply is tool calls; the reply splitter hands over from the marker on.
    markers: ClassVar[tuple[str, ...]]
    # A reply that opens with this (after whitespace) is a tool call from its first character.
    opens_with: ClassVar[str | None] = None
    # One call as the family writes it, for prompts of templates that render calls but do
    # not describe tools (None: the Hermes convention's words).
    example: ClassVar[str | None] = None

    def __init__(self, schemas: Mapping[str, dict] | None = None) -> None:
        self.schemas: dict[str, dict] = dict(schemas or {})

    @property
    @abstractmethod
    def started_any(self) -> bool:
        """Whether a call was recognised (text that only looked like one is released)."""

    @abstractmethod
    def feed(self, text: str) -> list[CallEvent]: ...

    @abstractmethod
    def finish(self) -> list[CallEvent]: ...

    @abstractmethod
    def call_rule(self, function: Function) -> str:
        """A lark expression for one call of `function` in this syntax (see `lit`, `json_rule`)."""

    # Between two calls of a required reply, and around them all.
    call_separator: ClassVar[str] = "\n"
    calls_prefix: ClassVar[str] = ""
    calls_suffix: ClassVar[str] = ""

    def grammar(self, functions: Sequence[Function], parallel: bool) -> str:
        """Lark for llguidance: one call of any of `functions` (one named function when only it
        is given), or several when `parallel`, written as the family writes them."""
        rules = [f"call_{i}: {self.call_rule(f)}" for i, f in enumerate(functions)]
        call = " | ".join(f"call_{i}" for i in range(len(functions)))
        calls = "call" if not parallel else f"call ({lit(self.call_separator)} call)*"
        head = lit(self.calls_prefix) + " " if self.calls_prefix else ""
        tail = " " + lit(self.calls_suffix) if self.calls_suffix else ""
        return "\n".join([f"start: {head}{calls}{tail}", f"call: {call}", *rules])


def lit(text: str) -> str:
    """A lark string literal."""
    return json.dumps(text, ensure_ascii=False)


# Compact separators, no free whitespace (as response_format grammars): small models otherwise
# pad JSON with blank lines.
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def json_rule(schema: dict) -> str:
    """A lark expression for a JSON value matching `schema`."""
    styled = {**schema, "x-guidance": JSON_STYLE}
    return "%json " + json.dumps(styled, ensure_ascii=False)


def decode_json(text: str) -> object:
    """The JSON value of `text`, or None when it is not JSON."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # deep nesting: text as it came
        return None


def text_until(terminal: str, close: str) -> str:
    """A lark terminal definition: any text that does not contain `close`, then `close` (a raw
    string value runs to its closing tag and may hold anything else, `<` included). One
    terminal, so it ends exactly at the first `close` (a greedy text terminal followed by a
    literal would run past it); llguidance takes `&`/`~` in terminals only."""
    escaped = _regex(close)
    return f"{terminal}: (/(?s:.*)/ & ~/(?s:.*){escaped}(?s:.*)/) {lit(close)}"


def _regex(text: str) -> str:
    """`text` as a literal inside a lark `/.../` regex (Rust regex syntax)."""
    out = []
    for char in text:
        if char == "\n":
            out.append("\\n")
        elif char in r"\.+*?()|[]{}^$#&-~/":
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)
