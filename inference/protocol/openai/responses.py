"""Request and response shapes of the OpenAI Responses API (POST /v1/responses and its stored
responses), mirroring the official SDK's `openai.types.responses` models."""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidatorFunctionWrapHandler,
    computed_field,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from inference.protocol.errors import invalid_param
from inference.protocol.openai.chat import FUNCTION_NAME
from inference.protocol.openai.common import JSONObject, Probability
from inference.protocol.wire import RequestModel, Speculative

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------- input items


class InputText(RequestModel):
    type: Literal["input_text"] = "input_text"
    text: str


class OutputText(RequestModel):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = Field(default_factory=list)


class InputImage(RequestModel):
    """An image in a message, for a vision model: a data: URL (or, where the server fetches
    them, an http(s) URL). file_id images are refused (this server keeps no files)."""

    model_config = ConfigDict(extra="ignore")  # file_id: null

    type: Literal["input_image"] = "input_image"
    image_url: str = Field(min_length=1)
    detail: Literal["auto", "low", "high"] = "auto"


def _part_type(value: Any) -> str:
    # Dicts while validating, models while serializing.
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return f"type={kind}"


ContentPart = Annotated[
    Annotated[InputText, Tag("type=input_text")]
    | Annotated[OutputText, Tag("type=output_text")]
    | Annotated[InputImage, Tag("type=input_image")],
    Discriminator(_part_type),
]


class MessageItem(RequestModel):
    """A message; `type: "message"` may be left out (OpenAI's "easy" input message)."""

    model_config = ConfigDict(extra="ignore")  # id, status, phase: accepted, not needed

    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[ContentPart]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content if not isinstance(part, InputImage))

    def has_images(self) -> bool:
        return not isinstance(self.content, str) and any(
            isinstance(part, InputImage) for part in self.content
        )


class FunctionCallItem(RequestModel):
    """A call the model made earlier, sent back as context."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["function_call"]
    id: str | None = None
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    namespace: str | None = None  # a call of a namespace tool's function
    arguments: str


class FunctionCallOutputItem(RequestModel):
    """What the client's function returned for a call."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["function_call_output"]
    id: str | None = None
    call_id: str = Field(min_length=1)
    output: str | list[InputText]

    def text(self) -> str:
        if isinstance(self.output, str):
            return self.output
        return "".join(part.text for part in self.output)


class ReasoningInputItem(RequestModel):
    """Reasoning from an earlier reply: accepted and kept, never shown to the model again."""

    model_config = ConfigDict(extra="allow")

    type: Literal["reasoning"]
    id: str | None = None
    summary: list[JSONObject] = Field(default_factory=list)
    content: list[JSONObject] | None = None


INPUT_ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning")


def _item_type(value: Any) -> str:
    if isinstance(value, dict):
        return f"type={value.get('type', 'message')}"
    return f"type={getattr(value, 'type', None)}"


InputItem = Annotated[
    Annotated[MessageItem, Tag("type=message")]
    | Annotated[FunctionCallItem, Tag("type=function_call")]
    | Annotated[FunctionCallOutputItem, Tag("type=function_call_output")]
    | Annotated[ReasoningInputItem, Tag("type=reasoning")],
    Discriminator(_item_type),
]

# ---------------------------------------------------------------------- tools and formats


class FunctionToolParam(RequestModel):
    """Responses tools are flat: {"type": "function", "name", "description", "parameters"}."""

    type: Literal["function"]
    name: str = Field(pattern=FUNCTION_NAME)
    description: str | None = None
    parameters: JSONObject | None = None
    strict: bool | None = None


class NamespaceToolParam(RequestModel):
    """Function tools grouped under a name (Codex's `multi_agent_v1`): the model is offered each
    function under its own name (qualified `namespace__name` only when two would collide), and
    its calls come back with `name` and `namespace` apart, as Codex reads them."""

    type: Literal["namespace"]
    name: str = Field(pattern=FUNCTION_NAME)
    description: str | None = None
    tools: list[FunctionToolParam] = Field(min_length=1, max_length=128)


ToolParam = Annotated[
    Annotated[FunctionToolParam, Tag("type=function")]
    | Annotated[NamespaceToolParam, Tag("type=namespace")],
    Discriminator(_part_type),
]


@dataclass(frozen=True)
class OfferedFunction:
    """A function as the model is offered it: under `offered` (its name, unless qualified), and
    where it came from."""

    offered: str
    tool: FunctionToolParam
    namespace: str | None = None


def offered_functions(tools: list[FunctionToolParam | NamespaceToolParam]) -> list[OfferedFunction]:
    plain = [OfferedFunction(t.name, t) for t in tools if isinstance(t, FunctionToolParam)]
    grouped = [
        (group.name, tool)
        for group in tools
        if isinstance(group, NamespaceToolParam)
        for tool in group.tools
    ]
    counts = Counter([t.name for t in tools if isinstance(t, FunctionToolParam)])
    counts.update(tool.name for _, tool in grouped)
    return plain + [
        OfferedFunction(tool.name if counts[tool.name] == 1 else f"{ns}__{tool.name}", tool, ns)
        for ns, tool in grouped
    ]


class FunctionToolChoice(RequestModel):
    type: Literal["function"]
    name: str


class TextFormatText(RequestModel):
    type: Literal["text"]


class TextFormatJSONObject(RequestModel):
    type: Literal["json_object"]


class TextFormatJSONSchema(RequestModel):
    # `schema` on the wire both ways (the attribute name would shadow BaseModel.schema).
    model_config = ConfigDict(validate_by_name=True, serialize_by_alias=True)

    type: Literal["json_schema"]
    name: str = Field(pattern=FUNCTION_NAME)
    schema_: JSONObject = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


TextFormat = Annotated[
    Annotated[TextFormatText, Tag("type=text")]
    | Annotated[TextFormatJSONObject, Tag("type=json_object")]
    | Annotated[TextFormatJSONSchema, Tag("type=json_schema")],
    Discriminator(_part_type),
]


class TextConfig(RequestModel):
    model_config = ConfigDict(extra="allow")  # verbosity: accepted, nothing to tune

    format: TextFormat = Field(default_factory=lambda: TextFormatText(type="text"))


class ReasoningConfig(RequestModel):
    model_config = ConfigDict(extra="allow")  # summary, generate_summary: no summaries here

    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    summary: str | None = None  # auto, concise, detailed, none: no summaries are written here

    def enabled(self) -> bool | None:
        """Thinking on or off as asked; None: the model's own default."""
        if self.effort is None:
            return None
        return self.effort != "none"


# ------------------------------------------------------------------------------- request

BUILT_IN_TOOLS = (
    "web_search",
    "web_search_preview",
    "file_search",
    "computer_use_preview",
    "computer",
    "code_interpreter",
    "image_generation",
    "mcp",
    "local_shell",
    "shell",
    "apply_patch",
    "custom",
)
MAX_METADATA_PAIRS = 16


class ResponseRequest(RequestModel):
    """POST /v1/responses. Unknown fields (include, truncation, service_tier, top_logprobs,
    prompt_cache_key...) are tolerated and logged, as on the other endpoints."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    input: str | list[InputItem]
    instructions: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: Probability | None = None
    tools: list[ToolParam] | None = Field(default=None, max_length=128)
    tool_choice: Literal["none", "auto", "required"] | FunctionToolChoice | None = None
    parallel_tool_calls: bool = True
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    store: bool = True
    # "" is no id: stored as a link to no response, it was a 500 (found by the fuzz test)
    previous_response_id: str | None = Field(default=None, min_length=1)
    metadata: dict[str, str] | None = None
    stream: bool = False
    user: str | None = Field(default=None, max_length=256)  # the column's size
    background: bool | None = None
    speculative: Speculative | None = None  # our extension, as on chat

    @model_validator(mode="wrap")
    @classmethod
    def _named_errors(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> ResponseRequest:
        """Errors name the param as OpenAI does ("input.0.role"), without pydantic's labels
        for union members ("list[...]", "type=message")."""
        if isinstance(data, dict):
            data = _precheck(data)
        try:
            return handler(data)
        except ValidationError as exc:
            raise named_error(exc) from None

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, dict):
            raise invalid_param("metadata", "metadata must be an object of string pairs.")
        if len(value) > MAX_METADATA_PAIRS:
            raise invalid_param(
                "metadata", f"metadata takes at most {MAX_METADATA_PAIRS} key-value pairs."
            )
        for key, item in value.items():
            if not isinstance(item, str) or len(key) > 64 or len(item) > 512:
                raise invalid_param(
                    "metadata",
                    "metadata values must be strings; keys take at most 64 characters, "
                    "values at most 512.",
                )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ResponseRequest:
        if self.background:
            raise invalid_param(
                "background", "background responses are not supported: send background: false."
            )
        if isinstance(self.input, list) and not self.input:
            raise invalid_param("input", "input must not be an empty list.")
        if isinstance(self.input, str) and not self.input:
            raise invalid_param("input", "input must not be empty.")
        self._check_tools()
        return self

    def functions(self) -> list[OfferedFunction]:
        return offered_functions(self.tools or [])

    def _check_tools(self) -> None:
        names = [function.offered for function in self.functions()]
        if len(set(names)) != len(names):
            raise invalid_param("tools", "Tool function names must be unique.")
        choice = self.tool_choice
        if isinstance(choice, FunctionToolChoice) and choice.name not in names:
            raise invalid_param(
                "tool_choice", f"tool_choice names '{choice.name}', which is not in tools."
            )
        if choice == "required" and not names:
            raise invalid_param("tool_choice", "tool_choice 'required' needs tools.")

    def input_items(self) -> list[MessageItem | FunctionCallItem | FunctionCallOutputItem]:
        if isinstance(self.input, str):
            return [MessageItem(role="user", content=self.input)]
        return list(self.input)  # type: ignore[arg-type]

    def effective_tool_choice(self) -> str | FunctionToolChoice:
        return self.tool_choice or "auto"

    def text_config(self) -> TextConfig:
        return self.text or TextConfig()


# Fields OpenAI has that this server refuses rather than silently ignores.
REFUSED_FIELDS = {
    "conversation": "conversations are not supported: chain responses with previous_response_id.",
    "prompt": "reusable prompt templates are not supported: send input and instructions.",
}


def _precheck(data: dict) -> dict:
    """What pydantic would report badly (which union member failed) or not at all; the data
    without the built-in tools a client merely offers."""
    for field, message in REFUSED_FIELDS.items():
        if data.get(field) is not None:
            raise invalid_param(field, message)
    tools = data.get("tools")
    if isinstance(tools, list):
        for index, tool in enumerate(tools):
            if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
                raise invalid_param(f"tools.{index}.type", _tool_message(None))
        data = _without_built_in_tools(data, tools)
    text_format = data.get("text", {}).get("format") if isinstance(data.get("text"), dict) else None
    if isinstance(text_format, dict) and text_format.get("type") not in TEXT_FORMATS:
        raise invalid_param(
            "text.format.type", f"text.format.type must be one of {', '.join(TEXT_FORMATS)}."
        )
    choice = data.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") != "function":
        raise invalid_param("tool_choice", _tool_message(choice.get("type")))
    items = data.get("input")
    if isinstance(items, list):
        for index, item in enumerate(items):
            _precheck_item(item, f"input.{index}")
    return data


def _without_built_in_tools(data: dict, tools: list[dict]) -> dict:
    """Built-in tools (web search, image generation, freeform `custom` tools...) run on
    OpenAI's side: a client that merely offers one (Codex offers web_search) gets its turn
    without it; forcing one is refused (tool_choice)."""
    kept = [tool for tool in tools if tool["type"] in ("function", "namespace")]
    if len(kept) == len(tools):
        return data
    left_out = [tool["type"] for tool in tools if tool["type"] not in ("function", "namespace")]
    log.info("leaving out built-in tools: %s", ", ".join(left_out))
    return {**data, "tools": kept}


def _tool_message(kind: object) -> str:
    if kind in BUILT_IN_TOOLS:
        return (
            f"tool_choice forces the built-in tool '{kind}': this server runs no tools itself. "
            "Declare function tools ({type: 'function', name, parameters}) and force one."
        )
    if kind is None:
        return "Each tool needs a type: function (or namespace, a group of functions)."
    return "tool_choice can name only a function: {type: 'function', name}."


UNSUPPORTED_PARTS = {"input_file", "input_audio"}
TEXT_PARTS = {"input_text", "output_text"}
TEXT_FORMATS = ("text", "json_object", "json_schema")


def _precheck_item(item: Any, where: str) -> None:
    if not isinstance(item, dict):
        raise invalid_param(where, "Each input item must be an object.")
    kind = item.get("type", "message")
    if kind not in INPUT_ITEM_TYPES:
        raise invalid_param(
            f"{where}.type",
            f"Input items of type {kind!r} are not supported; this server takes "
            f"{', '.join(INPUT_ITEM_TYPES)}.",
        )
    parts = item.get("content") if kind == "message" else item.get("output")
    if not isinstance(parts, list):
        return
    name = "content" if kind == "message" else "output"
    for index, part in enumerate(parts):
        part_type = part.get("type") if isinstance(part, dict) else None
        if not isinstance(part_type, str):
            continue  # left to the schema, which names the field (a list is not hashable)
        if part_type == "input_image" and name == "content":
            _precheck_image(part, f"{where}.{name}.{index}")
            continue
        if part_type in UNSUPPORTED_PARTS or part_type == "input_image":
            raise invalid_param(
                f"{where}.{name}.{index}",
                f"'{part_type}' content is not supported here: images go in a message's "
                "content (input_image), other files are not read."
                if part_type == "input_image"
                else f"'{part_type}' content is not supported: the models this server runs "
                "read text and images only.",
            )
        if part_type not in TEXT_PARTS:
            raise invalid_param(
                f"{where}.{name}.{index}.type",
                f"Unknown content part type {part_type!r}: use input_text (or output_text).",
            )


def _precheck_image(part: dict, where: str) -> None:
    if part.get("file_id") is not None:
        raise invalid_param(
            f"{where}.file_id",
            "Images by file_id are not supported: this server keeps no files. Send image_url "
            "as a data: URL (data:image/png;base64,...).",
        )


# Labels pydantic puts in a location for union members and tags, never field names.
_LABEL = re.compile(r"[\[\]=]|^(str|int|float|bool|list|dict|none|function-[a-z]+|[A-Z]\w*)$")


def named_error(exc: ValidationError) -> Exception:
    """The first error, as an invalid_param naming the field without union labels."""
    errors = exc.errors(include_url=False)
    first = next((e for e in errors if e["type"] == "invalid_param"), None)
    if first is not None:
        return invalid_param(first["ctx"]["param"], first["msg"])
    # In `str | list[...]` the string member's complaint hides the real one: skip it.
    first = next((e for e in errors if e["type"] != "string_type"), errors[0])
    parts = [str(p) for p in first["loc"] if not (isinstance(p, str) and _LABEL.search(p))]
    param = ".".join(parts)
    if not param:
        return PydanticCustomError("invalid_param", first["msg"], {"param": None})
    return invalid_param(param, f"Invalid value for '{param}': {first['msg']}")


# ----------------------------------------------------------------------------- response


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


class DeletedResponse(BaseModel):
    id: str
    object: Literal["response"] = "response"
    deleted: Literal[True] = True


class InputItemList(BaseModel):
    """GET /v1/responses/{id}/input_items: stored items as the SDK's ResponseItem union."""

    object: Literal["list"] = "list"
    data: list[JSONObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class InputItemsQuery(BaseModel):
    """GET /v1/responses/{id}/input_items's query string: a page of items, newest first unless
    order=asc, after the item whose id is `after` (OpenAI's cursor)."""

    limit: int = Field(20, ge=1, le=100)
    order: Literal["asc", "desc"] = "desc"
    after: str = ""  # none: from the first item
