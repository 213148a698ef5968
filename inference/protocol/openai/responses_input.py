"""The Responses API's input items (`input` of POST /v1/responses, and what GET
.../input_items gives back): messages with their content parts, earlier function calls and
their outputs, earlier reasoning."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, Tag

from inference.protocol.openai.common import JSONObject
from inference.protocol.wire import RequestModel


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
    """The tag of a union told apart by `type` ("type=input_text"). Its name shows in
    pydantic's message for a part of no known type ("found using _part_type()"), which a
    client reads: responses_options' unions use it too rather than a renamed copy."""
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
    # An item without a type is a message (the "easy" input message).
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
