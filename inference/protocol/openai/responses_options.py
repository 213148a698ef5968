"""The Responses API's request options that the response object echoes back: tools (flat
functions and namespaces of them), tool_choice, the text format and the reasoning config."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import ConfigDict, Discriminator, Field, Tag

from inference.protocol.openai.chat import FUNCTION_NAME
from inference.protocol.openai.common import JSONObject
from inference.protocol.openai.responses_input import _part_type
from inference.protocol.wire import RequestModel


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
