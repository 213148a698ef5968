"""Error dialects: how an APIError reaches a client of one wire protocol, as a response and as
the end of a broken stream. An endpoint names its dialect; views only raise APIError."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.http import HttpResponse
from pydantic import BaseModel

from inference.edge.responses import json_response
from inference.protocol.errors import APIError
from inference.protocol.openai.errors import error_body
from inference.serving.sse import DONE, sse_event


@dataclass(frozen=True)
class Dialect:
    name: str
    error_body: Callable[[APIError], BaseModel]

    def error_response(self, error: APIError) -> HttpResponse:
        response = json_response(self.error_body(error), status=error.status)
        for name, value in error.headers.items():
            response[name] = value
        return response

    def stream_failure(self, error: APIError) -> list[str]:
        """The last lines of a stream that broke after its headers were sent."""
        return [sse_event(self.error_body(error)), DONE]


# {"error": {"message", "type", "param", "code"}}; streams end with an error event, then
# [DONE]. Anthropic's {"type": "error", "error": {...}} and its `event: error` join in step 9.
OPENAI = Dialect("openai", error_body)
