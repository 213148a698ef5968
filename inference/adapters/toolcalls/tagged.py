"""What the tag-delimited syntaxes share (Qwen's XML parameters, GLM's arg_key/arg_value,
MiniMax's invoke): a reader that finds the next of some tags in streamed text, a base class
that turns names, keys and value text into call events through ArgumentsWriter, and the
grammar pieces that keep a forced call's values from writing their own closing tag.

A subclass is a small state machine: `_step` reads from the current state's tags and says
whether it moved on; the base feeds until it cannot."""

from __future__ import annotations

import re
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import ClassVar

from inference.adapters.reasoning import partial_suffix
from inference.adapters.toolcalls.arguments import ArgumentsWriter, is_string
from inference.adapters.toolcalls.base import (
    CallEvent,
    Function,
    ToolSyntax,
    json_rule,
    lit,
    text_until,
)


class TagReader:
    """Streamed text read up to the first of some tags; text that may be the start of a tag
    is held until the next piece says whether it is one."""

    def __init__(self) -> None:
        self._buffer = ""

    def add(self, text: str) -> None:
        self._buffer += text

    def unread(self, text: str) -> None:
        self._buffer = text + self._buffer

    def take_all(self) -> str:
        text, self._buffer = self._buffer, ""
        return text

    def until(self, tags: Sequence[str]) -> tuple[str, str | None]:
        """(text before the first of `tags`, that tag), both consumed; or, when none is there
        yet, (the text that cannot begin one, None)."""
        hits = [(i, -len(t), t) for t in tags if (i := self._buffer.find(t)) >= 0]
        if hits:
            found, _, tag = min(hits)
            text, self._buffer = self._buffer[:found], self._buffer[found + len(tag) :]
            return text, tag
        keep = max(partial_suffix(self._buffer, t) for t in tags)
        cut = len(self._buffer) - keep
        text, self._buffer = self._buffer[:cut], self._buffer[cut:]
        return text, None


class _OpenCall:
    def __init__(self, index: int, name: str, writer: ArgumentsWriter) -> None:
        self.index = index
        self.name = name
        self.writer = writer
        self.arguments = ""  # every piece handed on so far


class TaggedSyntax(ToolSyntax):
    # Values sit on lines of their own (`<parameter=k>\nV\n</parameter>`): one newline at each
    # end belongs to the format.
    strip_newline: ClassVar[bool] = False
    # States in which a cut-off reply leaves the call's arguments incomplete.
    unfinished_states: ClassVar[tuple[str, ...]] = ("key", "value")
    # The text that ends a string value (a forced call's value may not contain it).
    value_close: ClassVar[str]

    def __init__(self, schemas: Mapping[str, dict] | None = None) -> None:
        super().__init__(schemas)
        self._reader = TagReader()
        self._state = "between"
        self._count = 0
        self._call: _OpenCall | None = None
        self._word = ""  # a name or key read so far

    @property
    def started_any(self) -> bool:
        return self._count > 0

    def feed(self, text: str) -> list[CallEvent]:
        self._reader.add(text)
        events: list[CallEvent] = []
        while self._step(events):
            pass
        return events

    def finish(self) -> list[CallEvent]:
        """A call cut off midway ends with what it has, closed as JSON; cut inside a key or
        value it is not valid (the value may be half written)."""
        events: list[CallEvent] = []
        if self._call is not None:
            cut = self._state in self.unfinished_states
            if self._state == "value":
                self._end_value(events)
            self._close(events, valid=not cut)
        self._state = "between"
        return events

    @abstractmethod
    def _step(self, events: list[CallEvent]) -> bool:
        """Read on from the current state; whether it moved to another."""

    def _read_word(self, tags: Sequence[str]) -> tuple[str, str] | None:
        """A name or key, whole once one of `tags` ends it (stripped), with that tag."""
        text, tag = self._reader.until(tags)
        self._word += text
        if tag is None:
            return None
        word, self._word = self._word.strip(), ""
        return word, tag

    def _read_value(self, tags: Sequence[str], events: list[CallEvent]) -> str | None:
        """A value's text handed on as it arrives; the tag that ended it, once one did."""
        text, tag = self._reader.until(tags)
        if text and self._call is not None:
            self._emit(self._call.writer.piece(text), events)
        return tag

    def _open(self, name: str, events: list[CallEvent]) -> None:
        writer = ArgumentsWriter(self.schemas.get(name), self.strip_newline)
        self._call = _OpenCall(self._count, name, writer)
        self._count += 1
        events.append(CallEvent("start", self._call.index, name))

    def _key(self, name: str, events: list[CallEvent]) -> None:
        if self._call is not None:
            self._emit(self._call.writer.key(name), events)

    def _end_value(self, events: list[CallEvent]) -> None:
        if self._call is not None:
            self._emit(self._call.writer.end_value(), events)

    def _close(self, events: list[CallEvent], valid: bool = True) -> None:
        call = self._call
        if call is None:
            return
        self._emit(call.writer.close(), events)
        self._call = None
        events.append(CallEvent("end", call.index, call.name, call.arguments, valid))

    def _emit(self, piece: str, events: list[CallEvent]) -> None:
        if piece and self._call is not None:
            self._call.arguments += piece
            events.append(CallEvent("arguments", self._call.index, self._call.name, piece))

    # The grammar of a forced call: the rules of grammar() plus the string-value terminal.

    def grammar(self, functions: Sequence[Function], parallel: bool) -> str:
        terminal = text_until("STRING_VALUE", self.value_close)
        return super().grammar(functions, parallel) + "\n" + terminal

    def parameters_rule(self, schema: dict) -> str:
        """The parameters of a call: required ones in schema order, then each optional one
        (or nothing), as `parameter_rule` writes one."""
        properties = schema.get("properties") or {}
        required = [k for k in properties if k in (schema.get("required") or [])]
        optional = [k for k in properties if k not in required]
        parts = [self.parameter_rule(k, properties[k]) for k in required]
        parts += [f"({self.parameter_rule(k, properties[k])})?" for k in optional]
        return " ".join(parts)

    def value_rule(self, schema: object, close: str) -> str:
        """A value and the text that closes it: a string is free text up to the close
        (STRING_VALUE includes `value_close`), one of its choices where the schema lists them
        (`enum`, `const`), anything else JSON."""
        if is_string(schema):
            choices = string_choices(schema)
            if choices:
                return f"({' | '.join(lit(c) for c in choices)}) {lit(close)}"
            rest = close[len(self.value_close) :]
            return "STRING_VALUE" + (f" {lit(rest)}" if rest else "")
        return f"{json_rule(schema if isinstance(schema, dict) else {})} {lit(close)}"

    @abstractmethod
    def parameter_rule(self, key: str, schema: object) -> str:
        """A lark expression for one parameter, its tags included."""


def string_choices(schema: object) -> list[str]:
    """The strings a string schema allows, when it lists them (empty: any string)."""
    if not isinstance(schema, Mapping):
        return []
    if isinstance(schema.get("const"), str):
        return [schema["const"]]
    values = schema.get("enum")
    if isinstance(values, list) and values and all(isinstance(v, str) for v in values):
        return list(values)
    return []


def attribute(text: str) -> str:
    """The value of a `name="…"` attribute (or a bare `=value`)."""
    quoted = re.search(r'"([^"]*)"', text)
    if quoted:
        return quoted.group(1)
    return text.split("=", 1)[-1].strip().strip("'\"")
