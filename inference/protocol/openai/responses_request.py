"""POST /v1/responses's body: the model, its input items and the options, checked as OpenAI
checks them (responses_precheck names the errors)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from inference.protocol.errors import invalid_param
from inference.protocol.openai.common import Probability
from inference.protocol.openai.responses_input import (
    FunctionCallItem,
    FunctionCallOutputItem,
    InputItem,
    MessageItem,
)
from inference.protocol.openai.responses_options import (
    FunctionToolChoice,
    OfferedFunction,
    ReasoningConfig,
    TextConfig,
    ToolParam,
    offered_functions,
)
from inference.protocol.openai.responses_precheck import named_error, precheck
from inference.protocol.wire import RequestModel, Speculative

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
            data = precheck(data)
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
