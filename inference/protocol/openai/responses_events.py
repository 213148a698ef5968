"""The typed server-sent events of a streamed response (`event: <type>` then its JSON), in the
shapes of the official SDK's `ResponseStreamEvent` union. Every event carries a
`sequence_number` counting from 0; the stream ends with response.completed, .incomplete or
.failed (or an `error` event), and no `[DONE]`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from inference.protocol.openai.responses_input import OutputText
from inference.protocol.openai.responses_object import (
    FunctionCall,
    OutputMessage,
    ReasoningItem,
    ReasoningText,
    ResponseObject,
)


class StreamEvent(BaseModel):
    type: str
    sequence_number: int


class ResponseLifecycleEvent(StreamEvent):
    type: Literal[
        "response.created",
        "response.in_progress",
        "response.completed",
        "response.incomplete",
        "response.failed",
    ]
    response: ResponseObject


class OutputItemEvent(StreamEvent):
    type: Literal["response.output_item.added", "response.output_item.done"]
    output_index: int
    item: OutputMessage | ReasoningItem | FunctionCall


class ContentPartEvent(StreamEvent):
    type: Literal["response.content_part.added", "response.content_part.done"]
    item_id: str
    output_index: int
    content_index: int
    part: OutputText | ReasoningText


class OutputTextDelta(StreamEvent):
    type: Literal["response.output_text.delta"] = "response.output_text.delta"
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list = []


class OutputTextDone(StreamEvent):
    type: Literal["response.output_text.done"] = "response.output_text.done"
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list = []


class ReasoningTextDelta(StreamEvent):
    type: Literal["response.reasoning_text.delta"] = "response.reasoning_text.delta"
    item_id: str
    output_index: int
    content_index: int
    delta: str


class ReasoningTextDone(StreamEvent):
    type: Literal["response.reasoning_text.done"] = "response.reasoning_text.done"
    item_id: str
    output_index: int
    content_index: int
    text: str


class FunctionCallArgumentsDelta(StreamEvent):
    type: Literal["response.function_call_arguments.delta"] = (
        "response.function_call_arguments.delta"
    )
    item_id: str
    output_index: int
    delta: str


class FunctionCallArgumentsDone(StreamEvent):
    type: Literal["response.function_call_arguments.done"] = "response.function_call_arguments.done"
    item_id: str
    output_index: int
    name: str
    arguments: str


class ErrorEvent(StreamEvent):
    """A stream that broke for a reason outside the response (a server bug)."""

    type: Literal["error"] = "error"
    code: str | None
    message: str
    param: str | None


STREAM_EVENTS = (
    ResponseLifecycleEvent,
    OutputItemEvent,
    ContentPartEvent,
    OutputTextDelta,
    OutputTextDone,
    ReasoningTextDelta,
    ReasoningTextDone,
    FunctionCallArgumentsDelta,
    FunctionCallArgumentsDone,
    ErrorEvent,
)
