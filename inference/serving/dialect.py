"""A dialect: how one wire protocol speaks. Each dialect package (serving/openai/,
serving/anthropic/, serving/responses/, serving/ollama/) exports one `Dialect` holding its error
body, how its stream events are framed (and what the stream's Content-Type is), how a broken
stream ends, and per generation endpoint its plan builder and reply writer. The edge picks one
per endpoint; the pipeline (pipeline.py) runs them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel

from inference.protocol.errors import APIError
from inference.serving.context import RequestContext
from inference.serving.plan import Plan
from inference.serving.resolve import ResolvedModel
from inference.serving.sse import SSE, Wire, data_event
from inference.serving.writer import ReplyWriter, Run

PlanBuilder = Callable[[BaseModel, ResolvedModel, RequestContext], Awaitable[Plan]]


@dataclass(frozen=True)
class Operation:
    """One generation endpoint of a dialect."""

    plan: PlanBuilder  # the request body into the neutral plan
    writer: Callable[[Run], ReplyWriter]  # engine events into the dialect's events and answer
    id_prefix: str  # of the generation's id (chatcmpl, cmpl, msg...)


@dataclass(frozen=True)
class Dialect:
    name: str
    error_body: Callable[[APIError], BaseModel]
    frame: Callable[[Wire], str] = data_event  # one event as the stream's lines
    media_type: str = SSE  # the stream's Content-Type (Ollama's: NDJSON)
    done: str = ""  # the line after a finished stream's last event (OpenAI's [DONE])
    # Each generation endpoint's operation, by its request body's model.
    operations: Mapping[type[BaseModel], Operation] = field(default_factory=dict)

    def stream_end(self, error: APIError, sequence: int) -> list[str]:
        """The last lines of a stream that broke after its first line: the error body as one
        more event (then the done line, where the dialect has one). `sequence`: the number the
        next event would carry, for a dialect that numbers its events."""
        return [self.frame(self.error_body(error)), *([self.done] if self.done else [])]

    def operation(self, body: BaseModel) -> Operation:
        for kind in type(body).__mro__:
            if kind in self.operations:
                return self.operations[kind]
        raise LookupError(f"{self.name} has no operation for {type(body).__name__}")
