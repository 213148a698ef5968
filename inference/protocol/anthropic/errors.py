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
    detail = AnthropicErrorDetail(type=error_type(error.status), message=error.message)
    return AnthropicErrorResponse(error=detail)
