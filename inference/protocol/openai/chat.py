"""Request and response shapes of POST /v1/chat/completions."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    ValidationError,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from inference.protocol.errors import invalid_param
from inference.protocol.openai.common import (
    ChoiceLogprobs,
    FinishReason,
    JSONObject,
    ResponseEnvelope,
    SamplingFields,
    Usage,
)
from inference.protocol.wire import RequestModel

FUNCTION_NAME = r"^[a-zA-Z0-9_-]{1,64}$"


class TextPart(RequestModel):
    type: Literal["text"]
    text: str


class ImageURL(RequestModel):
    url: str = Field(min_length=1)  # a data: URL, or http(s) where the server fetches them
    detail: Literal["auto", "low", "high"] = "auto"  # accepted; the model's processor decides


class ImagePart(RequestModel):
    type: Literal["image_url"]
    image_url: ImageURL


ContentPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]
_PARTS = TypeAdapter(list[ContentPart])


def _checked_parts(value: Any) -> Any:
    """A content list's first wrong part, named, rather than the union's "not a string"."""
    if isinstance(value, list):
        try:
            _PARTS.validate_python(value)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            index, *path = first["loc"]
            field = ".".join(str(p) for p in path[1:]) or "type"
            raise PydanticCustomError(
                "invalid_content_part",
                "content part {index} ({field}): {problem}",
                {"index": index, "field": field, "problem": first["msg"]},
            ) from None
    return value


class FunctionCall(RequestModel):
    name: str
    arguments: str


class ToolCall(RequestModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(RequestModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Annotated[str | list[ContentPart] | None, BeforeValidator(_checked_parts)] = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    # An assistant turn's thinking sent back, under either name clients use (see
    # AssistantMessage): reasoning templates read it as reasoning_content.
    reasoning_content: str | None = None
    reasoning: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ChatMessage:
        if self.role == "assistant":
            if self.content is None and not self.tool_calls:
                raise ValueError("an assistant message needs content or tool_calls")
        elif self.content is None:
            raise ValueError(f"a {self.role} message needs content")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs tool_call_id")
        return self

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content if isinstance(part, TextPart))
        return self.content or ""

    def image_parts(self) -> list[tuple[int, ImagePart]]:
        """(index in content, part) of each image, in order."""
        if not isinstance(self.content, list):
            return []
        return [(i, p) for i, p in enumerate(self.content) if isinstance(p, ImagePart)]


class FunctionDefinition(RequestModel):
    name: str = Field(pattern=FUNCTION_NAME)
    description: str | None = None
    parameters: JSONObject | None = None
    strict: bool | None = None


class ToolDefinition(RequestModel):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(RequestModel):
    name: str


class NamedToolChoice(RequestModel):
    type: Literal["function"]
    function: NamedFunction


class JSONSchemaFormat(RequestModel):
    name: str = Field(pattern=FUNCTION_NAME)
    description: str | None = None
    schema_: JSONObject | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormatText(RequestModel):
    type: Literal["text"]


class ResponseFormatJSONObject(RequestModel):
    type: Literal["json_object"]


class ResponseFormatJSONSchema(RequestModel):
    type: Literal["json_schema"]
    json_schema: JSONSchemaFormat


ResponseFormat = Annotated[
    ResponseFormatText | ResponseFormatJSONObject | ResponseFormatJSONSchema,
    Field(discriminator="type"),
]


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    tools: list[ToolDefinition] | None = Field(default=None, max_length=128)
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    response_format: ResponseFormat | None = None
    # Reasoning models: "none" switches thinking off, any other effort on (there is no
    # budget to scale); chat_template_kwargs go to the template as they are (vLLM's name).
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    chat_template_kwargs: JSONObject | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ChatCompletionRequest:
        # invalid_param, not ValueError: the error then names the right param.
        if self.top_logprobs and not self.logprobs:
            raise invalid_param("top_logprobs", "top_logprobs needs logprobs: true.")
        names = [t.function.name for t in self.tools or []]
        if len(set(names)) != len(names):
            raise invalid_param("tools", "Tool function names must be unique.")
        choice = self.tool_choice
        if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
            raise invalid_param(
                "tool_choice", f"tool_choice names '{choice.function.name}', which is not in tools."
            )
        if choice == "required" and not names:
            raise invalid_param("tool_choice", "tool_choice 'required' needs tools.")
        return self

    def output_limit(self) -> int | None:
        # max_completion_tokens replaces the deprecated max_tokens when both are sent.
        return self.max_completion_tokens or self.max_tokens

    def effective_tool_choice(self) -> str | NamedToolChoice:
        if not self.tools:
            return "none"
        return self.tool_choice or "auto"


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: None = None
    tool_calls: list[ToolCall] | None = None
    # A reasoning model's thinking, under both names clients read: vLLM moved to
    # `reasoning`; the Vercel AI SDK and OpenCode read `reasoning_content`.
    reasoning_content: str | None = None
    reasoning: str | None = None

    @model_serializer(mode="wrap")
    def _omit_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for key in ("tool_calls", "reasoning_content", "reasoning"):
            if data.get(key) is None:
                data.pop(key, None)
        return data


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReason | None


class ChatCompletion(ResponseEnvelope):
    object: Literal["chat.completion"] = "chat.completion"
    choices: list[ChatChoice]
    usage: Usage


class OnlyPresent(BaseModel):
    """A delta carries only what changed: {"content": "x"}, never "role": null."""

    @model_serializer(mode="wrap")
    def _only_present(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}


class FunctionCallDelta(OnlyPresent):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(OnlyPresent):
    # id, type and name come once, in a call's first delta; its arguments stream after.
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionCallDelta | None = None


class ChunkDelta(OnlyPresent):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChunkChoice(BaseModel):
    index: int
    delta: ChunkDelta
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReason | None = None


class ChatCompletionChunk(ResponseEnvelope):
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    choices: list[ChunkChoice]
    usage: Usage | None = None
