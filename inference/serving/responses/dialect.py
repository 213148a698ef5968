"""OpenAI's Responses dialect: OpenAI's error body, each event framed with its `event:` line and
numbered, no [DONE]. A reply the engine fails midway ends as a `response.failed` (the writer's);
a stream broken any other way ends with an `error` event carrying the next sequence_number."""

from __future__ import annotations

from inference.protocol.errors import APIError
from inference.protocol.openai.errors import error_body
from inference.protocol.openai.responses_events import ErrorEvent
from inference.protocol.openai.responses_request import ResponseRequest
from inference.serving.dialect import Dialect, Operation
from inference.serving.responses.plan import plan_response
from inference.serving.responses.writer import ResponseWriter
from inference.serving.sse import named_event


class ResponsesDialect(Dialect):
    def stream_end(self, error: APIError, sequence: int) -> list[str]:
        event = ErrorEvent(
            sequence_number=sequence, code=error.code, message=error.message, param=error.param
        )
        return [self.frame(event)]


DIALECT = ResponsesDialect(
    "responses",
    error_body,
    frame=named_event,
    operations={ResponseRequest: Operation(plan_response, ResponseWriter, "resp")},  # type: ignore[arg-type]
)
