"""Request and response shapes of the legacy POST /v1/completions."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from inference.protocol.errors import invalid_param
from inference.protocol.openai.common import (
    FinishReason,
    LegacyLogprobs,
    ResponseEnvelope,
    SamplingFields,
    Usage,
)

TokenIds = list[int]


class CompletionRequest(SamplingFields):
    prompt: str | list[str] | TokenIds | list[TokenIds]
    max_tokens: int | None = Field(default=16, ge=1)
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=20)
    best_of: int | None = Field(default=None, ge=1, le=8)
    suffix: str | None = None

    @model_validator(mode="after")
    def _supported(self) -> CompletionRequest:
        # invalid_param, not ValueError: the error then names the right param.
        if self.suffix:
            raise invalid_param("suffix", "suffix (fill-in-the-middle) is not supported.")
        if self.best_of is not None and self.best_of != self.n:
            raise invalid_param(
                "best_of", "best_of must equal n: this server does not rank extra candidates."
            )
        prompts = self.prompt if isinstance(self.prompt, list) else [self.prompt]
        if not prompts or any(p in ("", []) for p in prompts):
            raise invalid_param("prompt", "prompt must not be empty.")
        if self.echo and self.logprobs is not None:
            raise invalid_param(
                "echo", "echo together with logprobs (prompt logprobs) is not supported."
            )
        return self

    def prompts(self) -> list[str | TokenIds]:
        """One entry per prompt; each gets n choices."""
        prompt = self.prompt
        if isinstance(prompt, str):
            return [prompt]
        if all(isinstance(p, int) for p in prompt):
            return [prompt]  # type: ignore[list-item]
        return list(prompt)  # type: ignore[arg-type]


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: LegacyLogprobs | None = None
    finish_reason: FinishReason | None


class Completion(ResponseEnvelope):
    object: Literal["text_completion"] = "text_completion"
    choices: list[CompletionChoice]
    usage: Usage | None = None
