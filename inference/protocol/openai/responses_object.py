"""The response object of the Responses API (POST /v1/responses, GET /v1/responses/{id} and
the stream's lifecycle events) and the output items it holds, mirroring the official SDK's
`openai.types.responses.Response`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, computed_field

from inference.protocol.openai.common import JSONObject
from inference.protocol.openai.responses_input import OutputText
from inference.protocol.openai.responses_options import (
    FunctionToolChoice,
    ReasoningConfig,
    TextConfig,
    ToolParam,
)


class InputTokensDetails(BaseModel):
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int = 0


class ResponseUsage(BaseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int
    # Not OpenAI's nor Anthropic's: how many messages the catalog's truncate_middle policy left
    # out to fit the context; absent when none were.
    truncated_messages: int | None = Field(default=None, exclude_if=lambda v: v is None)


ItemStatus = Literal["in_progress", "completed", "incomplete"]


class OutputMessage(BaseModel):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    status: ItemStatus
    content: list[OutputText]


class ReasoningText(BaseModel):
    type: Literal["reasoning_text"] = "reasoning_text"
    text: str


class ReasoningItem(BaseModel):
    id: str
    type: Literal["reasoning"] = "reasoning"
    status: ItemStatus
    summary: list[JSONObject] = Field(default_factory=list)
    content: list[ReasoningText]


class FunctionCall(BaseModel):
    id: str
    type: Literal["function_call"] = "function_call"
    status: ItemStatus
    call_id: str
    name: str
    # The namespace tool the function came from; absent for a plain function tool.
    namespace: str | None = Field(default=None, exclude_if=lambda value: value is None)
    arguments: str


OutputItem = Annotated[OutputMessage | ReasoningItem | FunctionCall, Field(discriminator="type")]


class IncompleteDetails(BaseModel):
    reason: Literal["max_output_tokens", "content_filter"]


class ResponseError(BaseModel):
    # The SDK's ResponseError.code is a closed list: server_error or rate_limit_exceeded here.
    code: Literal["server_error", "rate_limit_exceeded"]
    message: str


ResponseStatus = Literal["in_progress", "completed", "incomplete", "failed"]


class ResponseObject(BaseModel):
    """The response object of POST /v1/responses, GET /v1/responses/{id} and stream events."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    completed_at: int | None = None
    status: ResponseStatus
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    model: str
    instructions: str | None = None
    output: list[OutputItem]
    usage: ResponseUsage | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    parallel_tool_calls: bool
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    tool_choice: Literal["none", "auto", "required"] | FunctionToolChoice
    tools: list[ToolParam]
    text: TextConfig
    reasoning: ReasoningConfig | None = None
    previous_response_id: str | None = None
    store: bool
    background: bool = False
    truncation: Literal["disabled"] = "disabled"
    user: str | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def output_text(self) -> str:
        """Every output_text part of the output's messages, joined (the SDKs' convenience)."""
        return "".join(
            part.text
            for item in self.output
            if isinstance(item, OutputMessage)
            for part in item.content
        )
