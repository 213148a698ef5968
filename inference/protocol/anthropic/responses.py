"""Responses of POST /v1/messages and /v1/messages/count_tokens."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]


class TextContent(BaseModel):
    type: Literal["text"] = "text"
    text: str


class ThinkingContent(BaseModel):
    type: Literal["thinking"] = "thinking"
    thinking: str
    # Anthropic signs thinking so it can be sent back unchanged; we sign nothing.
    signature: str = ""


class ToolUseContent(BaseModel):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


OutputBlock = Annotated[TextContent | ThinkingContent | ToolUseContent, Field(discriminator="type")]


class MessageUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    # Not OpenAI's nor Anthropic's: how many messages the catalog's truncate_middle policy left
    # out to fit the context; absent when none were.
    truncated_messages: int | None = Field(default=None, exclude_if=lambda v: v is None)


class MessageResponse(BaseModel):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[OutputBlock]
    stop_reason: StopReason | None
    stop_sequence: str | None = None
    usage: MessageUsage


class TokenCount(BaseModel):
    input_tokens: int
