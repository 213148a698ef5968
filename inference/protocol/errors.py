from __future__ import annotations

from dataclasses import dataclass

from pydantic_core import PydanticCustomError


class APIError(Exception):
    """An error that reaches the client, written in the endpoint's dialect. `type` and `code`
    use OpenAI's vocabulary; other dialects map them to their own."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        too_long: TooLong | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}
        self.too_long = too_long


@dataclass(frozen=True)
class TooLong:
    """A prompt over the model's context: each dialect's error names both numbers its own way
    (agents read them to decide how much history to compact)."""

    prompt_tokens: int
    context_length: int


def model_not_found(model: str) -> APIError:
    return APIError(
        f"The model '{model}' does not exist or is not enabled on this server.",
        status=404,
        param="model",
        code="model_not_found",
    )


def server_error(
    message: str = "The server had an error while processing your request.",
) -> APIError:
    return APIError(message, status=500, type="server_error", code="server_error")


def invalid_param(param: str, message: str) -> PydanticCustomError:
    """Raised in a model validator: a 400 naming `param`, though the check spans fields."""
    return PydanticCustomError("invalid_param", message, {"param": param})
