"""gpt-oss's harmony format: every message is a header, `<|message|>`, then its body.

    <|channel|>analysis<|message|>thinking<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{…}
    <|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{…}

A message addressed `to=functions.NAME` is a call of NAME whose body is its JSON arguments;
`<|call|>` ends it (a stop token, so it seldom reaches us). The family's reply reader
(adapters/harmony.py) hands a call over as its header and body; driven from plain content, the
syntax takes everything from the first header on and skips the messages that are not calls.

In the real vocabulary `<|channel|>`, `<|message|>`, `<|constrain|>` and `<|call|>` are special
tokens: a forced call's grammar names them as tokens (`<|channel|>` in llguidance lark), so
the model writes each as its one token, not as the text spelled out."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from inference.adapters.reasoning import partial_suffix
from inference.adapters.toolcalls.base import (
    CallEvent,
    Function,
    ToolSyntax,
    decode_json,
    json_rule,
    lit,
)

START = "<|start|>"
CHANNEL = "<|channel|>"
MESSAGE = "<|message|>"
CONSTRAIN = "<|constrain|>"
END = "<|end|>"
CALL = "<|call|>"
RETURN = "<|return|>"
ENDS = (END, CALL, RETURN)  # what ends a message's body
OPENS = (START, CHANNEL)  # what opens the next header (a body may be cut short by one)
FUNCTIONS = "functions."

_RECIPIENT = re.compile(r"to=([^\s<]+)")
_CHANNEL = re.compile(re.escape(CHANNEL) + r"\s*([A-Za-z_]+)")


@dataclass(frozen=True)
class Header:
    """What a message's header says: its channel and whom it is addressed to."""

    channel: str
    recipient: str

    @property
    def function(self) -> str | None:
        """The function this message calls (None: it is no call of ours)."""
        if self.recipient.startswith(FUNCTIONS):
            return self.recipient[len(FUNCTIONS) :] or None
        return None

    @property
    def kind(self) -> Literal["reasoning", "content", "calls"] | None:
        """How the body reads: thinking, text for the user, a call, or nothing (a call of a
        built-in tool such as `python` or `browser.search`, which no client offered)."""
        if self.function:
            return "calls"
        if self.recipient and self.recipient != "assistant":
            return None
        return "reasoning" if self.channel == "analysis" else "content"


def parse_header(text: str) -> Header:
    """The header's last channel (gpt-oss sometimes writes a stray `<|channel|>commentary` first)
    and its recipient, a function's first; the recipient may stand before the channel."""
    channels = _CHANNEL.findall(text)
    recipients = _RECIPIENT.findall(text)
    functions = [r for r in recipients if r.startswith(FUNCTIONS)]
    recipient = (functions or recipients or [""])[0]
    return Header(channels[-1] if channels else "", recipient)


def first_marker(text: str, markers: Sequence[str]) -> tuple[int, str] | None:
    """The earliest of `markers` in `text`, with where it is."""
    hits = [(i, m) for m in markers if (i := text.find(m)) >= 0]
    return min(hits) if hits else None


def held_back(text: str, markers: Sequence[str]) -> int:
    """How much of the end of `text` could be the start of one of `markers`."""
    return max(partial_suffix(text, m) for m in markers)


class _Arguments:
    """One call's JSON body, handed on as it streams: the whitespace around it is dropped."""

    def __init__(self, index: int, name: str) -> None:
        self.index = index
        self.name = name
        self.text = ""  # handed on so far
        self._space = ""  # whitespace that may yet turn out to end the body

    def piece(self, text: str) -> list[CallEvent]:
        if not self.text:
            text = text.lstrip()
        text = self._space + text
        stripped = text.rstrip()
        self._space = text[len(stripped) :]
        if not stripped:
            return []
        self.text += stripped
        return [CallEvent("arguments", self.index, self.name, stripped)]

    def end(self) -> list[CallEvent]:
        events = [] if self.text else self.piece("{}")  # a call without arguments takes none
        valid = isinstance(decode_json(self.text), dict)
        return [*events, CallEvent("end", self.index, self.name, self.text, valid)]


class HarmonySyntax(ToolSyntax):
    name = "harmony"
    label = "gpt-oss harmony: <|channel|>commentary to=functions.name … <|message|>{…}"
    # Driven from content (a family without the harmony reader), the first header is where
    # calls may start; text before it is content.
    markers = (START, CHANNEL)
    # The prompt ends `<|start|>assistant`, so a reply may open with the recipient.
    opens_with = "to="

    def __init__(self, schemas: Mapping[str, dict] | None = None) -> None:
        super().__init__(schemas)
        self._state: Literal["header", "body", "skip"] = "header"
        self._held = ""
        self._call: _Arguments | None = None
        self._count = 0

    @property
    def started_any(self) -> bool:
        return self._count > 0

    def feed(self, text: str) -> list[CallEvent]:
        self._held += text
        events: list[CallEvent] = []
        while self._held and getattr(self, f"_{self._state}")(events):
            pass
        return events

    def finish(self) -> list[CallEvent]:
        """A call cut off midway (max_tokens) ends with the arguments it has."""
        held, self._held = self._held, ""
        events: list[CallEvent] = []
        if self._call is not None:
            events = self._call.piece(held) + self._call.end()
            self._call = None
        self._state = "header"
        return events

    def _header(self, events: list[CallEvent]) -> bool:
        found = self._held.find(MESSAGE)
        if found < 0:
            return False  # the header is still being written
        header = self._held[:found]
        self._held = self._held[found + len(MESSAGE) :]
        # Text before the last `<|start|>` (an end marker, a blank) belongs to no header.
        name = parse_header(header[header.rfind(START) :] if START in header else header).function
        if name is None:
            self._state = "skip"
            return True
        self._call = _Arguments(self._count, name)
        self._count += 1
        events.append(CallEvent("start", self._call.index, name))
        self._state = "body"
        return True

    def _body(self, events: list[CallEvent]) -> bool:
        return self._message_body(events, keep=True)

    def _skip(self, events: list[CallEvent]) -> bool:
        return self._message_body(events, keep=False)

    def _message_body(self, events: list[CallEvent], keep: bool) -> bool:
        """A body runs to an end marker or to the next header, whichever comes first."""
        hit = first_marker(self._held, ENDS + OPENS)
        cut = hit[0] if hit else len(self._held) - held_back(self._held, ENDS + OPENS)
        text, self._held = self._held[:cut], self._held[cut:]
        if keep and self._call is not None:
            events.extend(self._call.piece(text))
        if hit is None:
            return False
        if keep and self._call is not None:
            events.extend(self._call.end())
            self._call = None
        if hit[1] in ENDS:
            self._held = self._held[len(hit[1]) :]
        self._state = "header"
        return True

    def call_rule(self, function: Function) -> str:
        # The header as gpt-oss writes it after the prompt's `<|start|>assistant`; `<|call|>`
        # ends the call and, as a stop token, the generation. Markers are written as text:
        # the engine makes each one the model's own token (engine/grammar_tokens.py).
        head = lit(
            f"<|channel|>commentary to={FUNCTIONS}{function.name} <|constrain|>json<|message|>"
        )
        return f"{head} {json_rule(function.schema)} {lit('<|call|>')}"

    def grammar(self, functions: Sequence[Function], parallel: bool) -> str:
        # `<|call|>` stops generation: a reply holds one call, whatever `parallel` says.
        return super().grammar(functions, False)
