"""Error dialects: how an APIError reaches a client of one wire protocol, as a response and as
the end of a broken stream. An endpoint names its dialect; views only raise APIError."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.http import HttpResponse
from pydantic import BaseModel

from inference.edge.responses import json_response
from inference.protocol.anthropic.errors import error_body as anthropic_error_body
from inference.protocol.anthropic.events import sse as anthropic_event
from inference.protocol.errors import APIError
from inference.protocol.openai.errors import error_body
from inference.serving.responses.sse import stream_error_end
from inference.serving.sse import DONE, sse_event


def openai_stream_end(body: BaseModel) -> list[str]:
    return [sse_event(body), DONE]


@dataclass(frozen=True)
class Dialect:
    name: str
    error_body: Callable[[APIError], BaseModel]
    # The lines that end a broken stream, given the error body.
    stream_end: Callable[[BaseModel], list[str]] = openai_stream_end

    def error_response(self, error: APIError) -> HttpResponse:
        response = json_response(self.error_body(error), status=error.status)
        for name, value in error.headers.items():
            response[name] = value
        return response

    def stream_failure(self, error: APIError) -> list[str]:
        """The last lines of a stream that broke after its headers were sent."""
        return self.stream_end(self.error_body(error))


# {"error": {"message", "type", "param", "code"}}; streams end with an error event, then
# [DONE].
OPENAI = Dialect("openai", error_body)
# {"type": "error", "error": {"type", "message"}}, the type named after the status; streams
# end with `event: error` and that body, and nothing after it.
ANTHROPIC = Dialect("anthropic", anthropic_error_body, lambda body: [anthropic_event(body)])
# OpenAI's Responses API: the same error body; a stream ends with `event: error` and
# {"type": "error", "code", "message", "param", "sequence_number"}, and no [DONE] after it.
RESPONSES = Dialect("responses", error_body, stream_error_end)  # type: ignore[arg-type]
