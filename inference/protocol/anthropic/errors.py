"""Anthropic's error body: {"type": "error", "error": {"type", "message"}}.

Our APIError speaks OpenAI's vocabulary; Anthropic names its error types after the status."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from inference.protocol.errors import APIError

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


class AnthropicErrorDetail(BaseModel):
    type: str
    message: str


class AnthropicErrorResponse(BaseModel):
    type: Literal["error"] = "error"
    error: AnthropicErrorDetail


def error_type(status: int) -> str:
    if status in ERROR_TYPES:
        return ERROR_TYPES[status]
    return "invalid_request_error" if status < 500 else "api_error"


def error_body(error: APIError) -> AnthropicErrorResponse:
    detail = AnthropicErrorDetail(type=error_type(error.status), message=message_of(error))
    return AnthropicErrorResponse(error=detail)


def message_of(error: APIError) -> str:
    """A prompt over the context is worded as Anthropic words it: Claude Code matches
    "prompt is too long" (and reads the two numbers) to offer compacting the conversation."""
    if error.too_long is None:
        return error.message
    too_long = error.too_long
    return (
        f"prompt is too long: {too_long.prompt_tokens} tokens > {too_long.context_length} maximum"
    )
