"""The server-sent events of a streamed message, each written `event: <type>\ndata: <json>`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, RootModel

from inference.protocol.anthropic.responses import MessageResponse, OutputBlock, StopReason


class MessageStart(BaseModel):
    type: Literal["message_start"] = "message_start"
    message: MessageResponse  # no content yet, no stop_reason


class ContentBlockStart(BaseModel):
    type: Literal["content_block_start"] = "content_block_start"
    index: int
    content_block: OutputBlock  # empty: its text, thinking or input comes in deltas


class Ping(BaseModel):
    type: Literal["ping"] = "ping"


class TextDelta(BaseModel):
    type: Literal["text_delta"] = "text_delta"
    text: str


class ThinkingDelta(BaseModel):
    type: Literal["thinking_delta"] = "thinking_delta"
    thinking: str


class SignatureDelta(BaseModel):
    type: Literal["signature_delta"] = "signature_delta"
    signature: str


class InputJSONDelta(BaseModel):
    type: Literal["input_json_delta"] = "input_json_delta"
    partial_json: str


BlockDelta = Annotated[
    TextDelta | ThinkingDelta | SignatureDelta | InputJSONDelta, Field(discriminator="type")
]


class ContentBlockDelta(BaseModel):
    type: Literal["content_block_delta"] = "content_block_delta"
    index: int
    delta: BlockDelta


class ContentBlockStop(BaseModel):
    type: Literal["content_block_stop"] = "content_block_stop"
    index: int


class StopDelta(BaseModel):
    stop_reason: StopReason
    stop_sequence: str | None = None


class OutputUsage(BaseModel):
    output_tokens: int


class MessageDelta(BaseModel):
    type: Literal["message_delta"] = "message_delta"
    delta: StopDelta
    usage: OutputUsage


class MessageStop(BaseModel):
    type: Literal["message_stop"] = "message_stop"


StreamEvent = (
    MessageStart
    | ContentBlockStart
    | Ping
    | ContentBlockDelta
    | ContentBlockStop
    | MessageDelta
    | MessageStop
)


class MessageStreamEvent(RootModel[StreamEvent]):
    """Any one of the events (for the API description)."""
