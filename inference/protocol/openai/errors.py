"""OpenAI's error object: {"error": {"message", "type", "param", "code"}}; a prompt over the
context adds llama.cpp's server's "n_prompt_tokens" and "n_ctx"."""

from __future__ import annotations

from pydantic import BaseModel, Field

from inference.protocol.errors import APIError


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None
    n_prompt_tokens: int | None = Field(default=None, exclude_if=lambda v: v is None)
    n_ctx: int | None = Field(default=None, exclude_if=lambda v: v is None)


class ErrorResponse(BaseModel):
    error: ErrorDetail


def error_body(error: APIError) -> ErrorResponse:
    detail = ErrorDetail(message=error.message, type=error.type, param=error.param, code=error.code)
    if error.too_long is not None:
        detail.n_prompt_tokens = error.too_long.prompt_tokens
        detail.n_ctx = error.too_long.context_length
    return ErrorResponse(error=detail)
