"""Ollama's error body: {"error": "message"}, the status saying the rest. Its clients read only
the message (the Python client raises ResponseError(error, status_code))."""

from __future__ import annotations

from pydantic import BaseModel

from inference.protocol.errors import APIError


class OllamaError(BaseModel):
    error: str


def error_body(error: APIError) -> OllamaError:
    if error.too_long is not None:
        too_long = error.too_long
        return OllamaError(
            error=f"the prompt is {too_long.prompt_tokens} tokens, more than the model's "
            f"context of {too_long.context_length}"
        )
    return OllamaError(error=error.message)
