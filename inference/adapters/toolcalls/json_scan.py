"""The one JSON string-and-bracket scanner: which characters of JSON text arriving piece by
piece are inside a string (escapes followed), which open or close a bracket outside strings,
and which brackets are still open. Every reader of partial JSON follows it: the JSON calls'
scanner (json_calls.py), a marked call's JSON value (marked.py), and serving's reading of
cut-off arguments (serving/tooluse.py)."""

from __future__ import annotations

from typing import Literal

# What a character was: string content (a backslash and what it escapes included), a string's
# opening or closing quote, an opening or closing bracket, or anything else outside strings.
Kind = Literal["text", "string_start", "string_end", "open", "close", "other"]


class JSONScan:
    def __init__(self) -> None:
        self.stack: list[str] = []  # the brackets still open, outermost first
        self.in_string = False
        self.escaped = False  # right after a backslash inside a string

    @property
    def depth(self) -> int:
        return len(self.stack)

    def step(self, char: str) -> Kind:
        """Follows one character; a closing bracket with none open closes nothing."""
        if self.in_string:
            if self.escaped:
                self.escaped = False
            elif char == "\\":
                self.escaped = True
            elif char == '"':
                self.in_string = False
                return "string_end"
            return "text"
        if char == '"':
            self.in_string = True
            return "string_start"
        if char in "{[":
            self.stack.append(char)
            return "open"
        if char in "}]":
            if self.stack:
                self.stack.pop()
            return "close"
        return "other"
