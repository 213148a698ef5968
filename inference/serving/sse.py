"""Streams: how an event is framed (each dialect picks one: server-sent events' two framings, or
Ollama's newline-delimited JSON), and the stream a view hands the edge."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from pydantic import BaseModel

from inference.protocol.errors import APIError

# What a stream's body is, as its Content-Type says.
SSE = "text/event-stream"
NDJSON = "application/x-ndjson"

# What ends a finished OpenAI chat or completions stream.
DONE = "data: [DONE]\n\n"


@dataclass(frozen=True)
class Trimmed:
    """A payload sent without some of its keys: chat's chunks leave out "usage" unless the
    client asked for it (with include_usage every chunk says "usage": null but the last)."""

    payload: BaseModel
    without: frozenset[str]


Wire = BaseModel | Trimmed


def data_event(event: Wire) -> str:
    """`data: {json}`: OpenAI's chat and completions."""
    if isinstance(event, Trimmed):
        return f"data: {event.payload.model_dump_json(exclude=set(event.without))}\n\n"
    return f"data: {event.model_dump_json()}\n\n"


def named_event(event: Wire) -> str:
    """`event: {type}` then `data: {json}`: Anthropic's Messages and OpenAI's Responses, whose
    events (their error bodies too) each carry their type."""
    payload = event.payload if isinstance(event, Trimmed) else event
    return f"event: {payload.type}\n{data_event(event)}"  # type: ignore[attr-defined]


def ndjson_line(event: Wire) -> str:
    """One JSON object on one line: Ollama's streams."""
    if isinstance(event, Trimmed):
        return event.payload.model_dump_json(exclude=set(event.without)) + "\n"
    return event.model_dump_json() + "\n"


@dataclass(frozen=True)
class EventStream:
    """A stream's lines for the edge to send as a streaming response, and how the stream ends
    should anything break it after its first line (in its dialect, numbered where the dialect
    numbers its events)."""

    lines: AsyncIterator[str]
    end: Callable[[APIError], list[str]]
    media_type: str = SSE
