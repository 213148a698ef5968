"""OpenAI's error object: {"error": {"message", "type", "param", "code"}}."""

from __future__ import annotations

from pydantic import BaseModel

from inference.protocol.errors import APIError


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


def error_body(error: APIError) -> ErrorResponse:
    detail = ErrorDetail(message=error.message, type=error.type, param=error.param, code=error.code)
    return ErrorResponse(error=detail)
