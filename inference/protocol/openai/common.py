"""Fields and shapes shared by chat and legacy completions."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from inference.protocol.wire import RequestModel, Speculative

Probability = Annotated[float, Field(ge=0.0, le=1.0)]
Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]


class StreamOptions(RequestModel):
    include_usage: bool = False


class SamplingFields(RequestModel):
    """What both endpoints accept to shape sampling; unknown fields are tolerated and logged."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: Probability | None = None
    top_k: int | None = Field(default=None, ge=0)
    min_p: Probability | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1, le=8)
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    repetition_penalty: float | None = Field(default=None, gt=0.0, le=10.0)
    logit_bias: dict[str, Annotated[float, Field(ge=-100, le=100)]] | None = None
    user: str | None = None
    speculative: Speculative | None = None

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value: str | list[str] | None) -> list[str] | None:
        if value is None:
            return None
        stops = [value] if isinstance(value, str) else value
        if len(stops) > 4:
            raise ValueError("at most 4 stop sequences")
        if any(not s for s in stops):
            raise ValueError("stop sequences must not be empty")
        return stops

    @field_validator("logit_bias")
    @classmethod
    def _token_ids(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for key in value or {}:
            if not key.isdigit():
                raise ValueError(f"logit_bias keys are token ids; {key!r} is not")
        return value

    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class ResponseEnvelope(BaseModel):
    """The fields every response and stream chunk of chat and legacy completions opens with;
    each subclass pins `object` to its own literal."""

    id: str
    object: str
    created: int
    model: str
    system_fingerprint: str


class PromptTokensDetails(BaseModel):
    cached_tokens: int


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None
    # Not OpenAI's nor Anthropic's: how many messages the catalog's truncate_middle policy left
    # out to fit the context; absent when none were.
    truncated_messages: int | None = Field(default=None, exclude_if=lambda v: v is None)


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob] | None
    refusal: None = None


class LegacyLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


JSONObject = dict[str, Any]
FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]
