"""Request bodies of POST /v1/messages and /v1/messages/count_tokens.

Strings where Anthropic also takes blocks (message content, system, tool results) become one
text block before validation, so a wrong value gets one clear error rather than one per shape
of a union. Unknown fields are tolerated: top-level ones are logged at the edge, those inside
blocks (cache_control, citations) are dropped. What agents send is taken as they send it:
system-role messages between turns (Claude Code's reminders), server tools merely offered
(left out, logged), images and documents inside tool results (a placeholder)."""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from inference.protocol.errors import invalid_param
from inference.protocol.wire import RequestModel, Speculative

log = logging.getLogger(__name__)

TOOL_NAME = r"^[a-zA-Z0-9_-]{1,128}$"
MAX_STOP_SEQUENCES = 16
MIN_THINKING_BUDGET = 1024


def _as_blocks(value: Any) -> Any:
    """A string is shorthand for one text block."""
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    if not isinstance(value, list):
        raise PydanticCustomError(
            "blocks_type", "Input should be a string or a list of content blocks"
        )
    return value


class TextBlockInput(RequestModel):
    type: Literal["text"]
    text: str


class UnsupportedDocument(RequestModel):
    """Documents in a message: refused with a message that says why."""

    type: Literal["document"]

    @model_validator(mode="before")
    @classmethod
    def _refuse(cls, data: Any) -> Any:
        raise PydanticCustomError(
            "unsupported_content", "document blocks are not supported by this server; send text."
        )


class OmittedMedia(RequestModel):
    """An image or document inside a tool result (an agent's Read of a picture or a PDF):
    the model is told it was there, rather than the whole conversation refused on every turn
    that follows."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["image", "document"]

    @property
    def text(self) -> str:
        return f"[{self.type} omitted: this server shows the model text only]"


class Base64ImageSource(RequestModel):
    type: Literal["base64"]
    media_type: Literal["image/png", "image/jpeg", "image/gif", "image/webp"]
    data: str = Field(min_length=1)


class URLImageSource(RequestModel):
    type: Literal["url"]
    url: str = Field(min_length=1)


class ImageBlockInput(RequestModel):
    """An image for a vision model (serving/images.py decodes and checks it)."""

    type: Literal["image"]
    source: Annotated[Base64ImageSource | URLImageSource, Field(discriminator="type")]


ResultPart = Annotated[TextBlockInput | OmittedMedia, Field(discriminator="type")]


class InputToolUse(RequestModel):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]


class InputToolResult(RequestModel):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: Annotated[
        list[ResultPart], BeforeValidator(_as_blocks, json_schema_input_type=str | list[ResultPart])
    ] = []
    is_error: bool = False

    def text(self) -> str:
        return "\n\n".join(part.text for part in self.content)


class InputThinking(RequestModel):
    """Earlier thinking sent back by clients: the template gets it as the assistant turn's
    reasoning_content (redacted thinking stays out: there is no text to show)."""

    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class InputRedactedThinking(RequestModel):
    type: Literal["redacted_thinking"]
    data: str


ContentBlock = Annotated[
    TextBlockInput
    | InputToolUse
    | InputToolResult
    | InputThinking
    | InputRedactedThinking
    | ImageBlockInput
    | UnsupportedDocument,
    Field(discriminator="type"),
]


class InputMessage(RequestModel):
    # "system": instructions between turns (Claude Code sends its reminders so).
    role: Literal["user", "assistant", "system"]
    content: Annotated[
        list[ContentBlock],
        BeforeValidator(_as_blocks, json_schema_input_type=str | list[ContentBlock]),
        Field(min_length=1),
    ]

    @model_validator(mode="after")
    def _blocks_fit_the_role(self) -> InputMessage:
        if self.role == "system":
            if any(block.type != "text" for block in self.content):
                raise PydanticCustomError(
                    "misplaced_block", "system messages hold text blocks only."
                )
            return self
        wrong = "tool_result" if self.role == "assistant" else "tool_use"
        if any(block.type == wrong for block in self.content):
            owner = "user" if wrong == "tool_result" else "assistant"
            raise PydanticCustomError(
                "misplaced_block",
                "{wrong} blocks belong in {owner} messages.",
                {"wrong": wrong, "owner": owner},
            )
        return self

    def text(self) -> str:
        return "\n\n".join(
            block.text for block in self.content if isinstance(block, TextBlockInput)
        )


class AnthropicTool(RequestModel):
    """A client tool (server tools are left out before this: MessagesInput._server_tools)."""

    type: Literal["custom"] | None = None
    name: str = Field(pattern=TOOL_NAME)
    description: str | None = None
    input_schema: dict[str, Any]
    # Loaded only when a tool search finds it (Claude Code's DeferredToolPlaceholder): not
    # shown to the model, as Anthropic does, unless the request forces it.
    defer_loading: bool = False

    @model_validator(mode="before")
    @classmethod
    def _object_schema(cls, data: Any) -> Any:
        schema = data.get("input_schema") if isinstance(data, dict) else None
        if isinstance(schema, dict) and schema.get("type") != "object":
            raise PydanticCustomError(
                "invalid_schema", "input_schema must be a JSON schema of type 'object'."
            )
        return data


class ToolChoiceAuto(RequestModel):
    type: Literal["auto"]
    disable_parallel_tool_use: bool = False


class ToolChoiceAny(RequestModel):
    type: Literal["any"]
    disable_parallel_tool_use: bool = False


class ToolChoiceTool(RequestModel):
    type: Literal["tool"]
    name: str
    disable_parallel_tool_use: bool = False


class ToolChoiceNone(RequestModel):
    type: Literal["none"]


ToolChoice = Annotated[
    ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone, Field(discriminator="type")
]


class ThinkingEnabled(RequestModel):
    type: Literal["enabled"]
    budget_tokens: int


class ThinkingDisabled(RequestModel):
    type: Literal["disabled"]


class ThinkingAdaptive(RequestModel):
    """The model decides when to think (newer Claude models): its own default here."""

    type: Literal["adaptive", "between_tools"]


Thinking = Annotated[
    ThinkingEnabled | ThinkingDisabled | ThinkingAdaptive, Field(discriminator="type")
]


class Metadata(RequestModel):
    user_id: str | None = None


class MessagesInput(RequestModel):
    """What makes the prompt: shared by create and count_tokens."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    messages: list[InputMessage] = Field(min_length=1)
    system: (
        Annotated[
            list[TextBlockInput],
            BeforeValidator(_as_blocks, json_schema_input_type=str | list[TextBlockInput]),
        ]
        | None
    ) = None
    tools: list[AnthropicTool] | None = Field(default=None, max_length=128)
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None

    @model_validator(mode="before")
    @classmethod
    def _server_tools(cls, data: Any) -> Any:
        """Anthropic's server tools (web search, web fetch, code execution...) run on
        Anthropic's side; a client that merely offers one (Claude Code does) gets its turn
        without it. A request that forces one cannot be answered: 400."""
        tools = data.get("tools") if isinstance(data, dict) else None
        if not isinstance(tools, list):
            return data
        server = [t for t in tools if isinstance(t, dict) and t.get("type") not in (None, "custom")]
        if not server:
            return data
        choice = data.get("tool_choice")
        forced = (
            choice.get("name")
            if isinstance(choice, dict) and choice.get("type") == "tool"
            else None
        )
        if forced is not None and forced in {t.get("name") for t in server}:
            raise invalid_param(
                "tool_choice",
                f"tool_choice forces the server tool '{forced}': this server runs no tools "
                "itself; declare a client tool (name, description, input_schema).",
            )
        log.info("leaving out server tools: %s", ", ".join(str(t.get("type")) for t in server))
        return {**data, "tools": [t for t in tools if t not in server]}

    @model_validator(mode="after")
    def _tools_consistent(self) -> MessagesInput:
        # invalid_param, not ValueError: the error then names the right param.
        names = [tool.name for tool in self.tools or []]
        if len(set(names)) != len(names):
            raise invalid_param("tools", "Tool names must be unique.")
        choice = self.tool_choice
        if isinstance(choice, ToolChoiceTool) and choice.name not in names:
            raise invalid_param(
                "tool_choice", f"tool_choice names '{choice.name}', which is not in tools."
            )
        if isinstance(choice, ToolChoiceAny) and not names:
            raise invalid_param("tool_choice", "tool_choice 'any' needs tools.")
        thinking = self.thinking
        if isinstance(thinking, ThinkingEnabled) and thinking.budget_tokens < MIN_THINKING_BUDGET:
            raise invalid_param(
                "thinking.budget_tokens",
                f"thinking.budget_tokens must be at least {MIN_THINKING_BUDGET}.",
            )
        return self

    def system_text(self) -> str | None:
        if self.system is None:
            return None
        return "\n\n".join(block.text for block in self.system)

    def thinking_enabled(self) -> bool | None:
        """What the request asked: True, False, or None for the model's own default."""
        if isinstance(self.thinking, ThinkingEnabled):
            return True
        if isinstance(self.thinking, ThinkingDisabled):
            return False
        return None


class MessagesRequest(MessagesInput):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[Annotated[str, Field(min_length=1)]] | None = Field(
        default=None, max_length=MAX_STOP_SEQUENCES
    )
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    metadata: Metadata | None = None
    stream: bool = False
    speculative: Speculative | None = None  # our extension, as on chat

    @model_validator(mode="after")
    def _budget_below_max_tokens(self) -> MessagesRequest:
        thinking = self.thinking
        if isinstance(thinking, ThinkingEnabled) and thinking.budget_tokens >= self.max_tokens:
            raise invalid_param(
                "thinking.budget_tokens", "thinking.budget_tokens must be less than max_tokens."
            )
        return self


class CountTokensRequest(MessagesInput):
    """create's body without the output fields (sent anyway, they are ignored)."""
