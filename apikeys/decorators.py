"""`api_key_required`: who may call a /v1 view, and how many of their requests may run."""

from __future__ import annotations

from functools import wraps

from django.http import HttpRequest, HttpResponse

from apikeys.auth import ANONYMOUS, Caller, authenticate, keys_required, limiter
from inference.decorators import View
from inference.observability import records
from inference.protocol.errors import APIError

MISSING = (
    "You didn't provide an API key. Send it in an Authorization header using Bearer auth "
    "(Authorization: Bearer YOUR_KEY)."
)


def _unauthorized(message: str) -> APIError:
    return APIError(
        message, status=401, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"}
    )


async def identify(request: HttpRequest) -> Caller:
    scheme, _, secret = request.headers.get("Authorization", "").partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret:
        if await keys_required():
            raise _unauthorized(MISSING)
        return ANONYMOUS
    if not await keys_required():
        return ANONYMOUS  # clients such as the openai SDK always send some key
    caller = await authenticate(secret)
    if caller is None:  # never echo the secret, not even masked
        raise _unauthorized("Incorrect API key provided.")
    return caller


def api_key_required(view: View) -> View:
    """Sets `request.caller`; holds one of the key's concurrency slots until the response
    (streamed or not) is finished or abandoned."""

    @wraps(view)
    async def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        caller = await identify(request)
        if not limiter.try_acquire(caller):
            raise APIError(
                f"Too many concurrent requests for API key '{caller.name}' "
                f"(limit {caller.max_concurrent}).",
                status=429,
                type="rate_limit_error",
                code="concurrency_limit_exceeded",
                headers={"Retry-After": "1"},
            )
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                limiter.release(caller)

        request.caller = caller
        if entry := records.current.get():
            entry.key = caller.name
        try:
            response = await view(request, *args, **kwargs)
        except BaseException:
            release()
            raise
        if response.streaming:
            # Django closes the response when the stream ends or the client goes away.
            response._resource_closers.append(release)
        else:
            release()
        return response

    return wrapper
