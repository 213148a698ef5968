from inference.engine.types import EngineError, ErrorKind
from inference.protocol.errors import APIError, TooLong, server_error


def api_error(error: EngineError) -> APIError:
    if error.kind is ErrorKind.INVALID_REQUEST:
        return APIError(error.message, param=error.param)
    if error.kind is ErrorKind.CONTEXT_LENGTH_EXCEEDED:
        too_long = None
        if error.prompt_tokens is not None and error.context_length is not None:
            too_long = TooLong(error.prompt_tokens, error.context_length)
        return APIError(
            error.message, param=error.param, code="context_length_exceeded", too_long=too_long
        )
    if error.kind is ErrorKind.PROMPT_TOO_LARGE:
        return APIError(
            f"{error.message} (MAX_REQUEST_PROMPT_TOKENS).",
            param=error.param or "prompt",
            code=error.kind.value,
        )
    if error.kind is ErrorKind.TIMEOUT:
        return APIError(error.message, status=504, type="server_error", code="timeout")
    if error.kind is ErrorKind.OVERLOADED:
        retry_after = str(round(error.retry_after or 1))
        return APIError(
            error.message,
            status=429,
            type="rate_limit_error",
            code="queue_full",
            headers={"Retry-After": retry_after},
        )
    if error.kind in (ErrorKind.ENGINE_RESTARTED, ErrorKind.SHUTTING_DOWN):
        return APIError(error.message, status=503, type="server_error", code=error.kind.value)
    if error.kind is ErrorKind.ENGINE_UNAVAILABLE:
        return APIError(error.message, status=503, type="server_error", code=error.kind.value)
    if error.kind is ErrorKind.MODEL_UNAVAILABLE:
        return APIError(error.message, status=503, type="server_error", code="model_unavailable")
    return server_error()
