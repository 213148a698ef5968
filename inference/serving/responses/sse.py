"""The Responses stream's framing: each event named in an `event:` line, then its JSON."""

from __future__ import annotations

from inference.protocol.openai.errors import ErrorResponse
from inference.protocol.openai.responses_events import ErrorEvent, StreamEvent


def typed_event(event: StreamEvent) -> str:
    return f"event: {event.type}\ndata: {event.model_dump_json()}\n\n"


def stream_error_end(body: ErrorResponse) -> list[str]:
    """The edge's last resort for a stream that broke outside the response's own handling
    (which ends with a numbered `error` event itself): the count is lost there, hence 0."""
    error = body.error
    event = ErrorEvent(sequence_number=0, code=error.code, message=error.message, param=error.param)
    return [typed_event(event)]
