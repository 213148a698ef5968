"""Who may call an endpoint. Each policy names the caller or raises an APIError (401/403);
the API key policy also holds one of the key's concurrency slots for the request's life."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from django.conf import settings
from django.http import HttpRequest
from django.middleware.csrf import CsrfViewMiddleware

from apikeys.auth import ANONYMOUS, Caller, anonymous, authenticate, keys_required, limiter
from apikeys.slots import shared_limiter, shared_limits
from inference.protocol.errors import APIError
from inference.serving.context import RequestContext

if TYPE_CHECKING:  # for an annotation only
    from django.contrib.auth.base_user import AbstractBaseUser

MISSING_KEY = (
    "You didn't provide an API key. Send it in an Authorization header using Bearer auth "
    "(Authorization: Bearer YOUR_KEY)."
)
MISSING_ANTHROPIC_KEY = (
    "You didn't provide an API key. Send it in an x-api-key header "
    "(or Authorization: Bearer YOUR_KEY)."
)


@dataclass(frozen=True)
class Auth:
    name: str
    check: Callable[[HttpRequest], Awaitable[Caller]]
    # Holds one of the caller's concurrency slots until the request's context closes.
    limit_concurrency: bool = False


def bearer(request: HttpRequest) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


async def anyone(request: HttpRequest) -> Caller:
    return ANONYMOUS


def _bad_key(message: str) -> APIError:
    return APIError(
        message, status=401, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"}
    )


async def api_key(request: HttpRequest) -> Caller:
    return await _key_holder(bearer(request), MISSING_KEY)


async def either_key(request: HttpRequest) -> Caller:
    """/v1/models answers both dialects' clients: a bearer token, or Anthropic's x-api-key."""
    secret = bearer(request) or request.headers.get("x-api-key", "").strip()
    return await _key_holder(secret, MISSING_KEY)


async def anthropic_key(request: HttpRequest) -> Caller:
    """Anthropic's SDKs send x-api-key; Claude Code with ANTHROPIC_AUTH_TOKEN sends a bearer
    token. The anthropic-version header is accepted and not required."""
    secret = request.headers.get("x-api-key", "").strip() or bearer(request)
    return await _key_holder(secret, MISSING_ANTHROPIC_KEY)


async def _key_holder(secret: str | None, missing: str) -> Caller:
    if not secret:
        if await keys_required():
            raise _bad_key(missing)
        return anonymous()
    if not await keys_required():
        return anonymous()  # clients such as the openai SDK always send some key
    caller = await authenticate(secret)
    if caller is None:  # never echo the secret, not even masked
        raise _bad_key("Incorrect API key provided.")
    return caller


OPERATOR = Caller(None, "admin-token", None, None, operator=True)


def _is_admin_token(token: str | None) -> bool:
    """Whether a bearer token is the admin token (compared in constant time)."""
    return token is not None and secrets.compare_digest(
        token.encode(), settings.ADMIN_TOKEN.encode()
    )


def _staff(user: AbstractBaseUser) -> Caller:
    """A staff member's session, speaking for an operator."""
    return Caller(None, f"staff:{user.get_username()}", None, None, operator=True)


def _denied(message: str) -> APIError:
    return APIError(message, status=401, type="authentication_error", code="invalid_admin_token")


def _csrf_rejected(request: HttpRequest) -> bool:
    # The CSRF middleware skips views marked csrf_exempt (every endpoint is, for /v1's sake):
    # a staff session's writes are checked here instead.
    return CsrfViewMiddleware(lambda r: None).process_view(request, None, (), {}) is not None


async def staff_or_token(request: HttpRequest, permission: str | None = None) -> Caller:
    """The admin token as a bearer token (every power), or a staff member's session (with CSRF
    for writes) holding `permission` when one is named (a superuser holds them all). The
    caller speaks for an operator: every enabled model, no key limits."""
    token = bearer(request)
    if token is not None:
        if _is_admin_token(token):
            return OPERATOR
        raise _denied("The admin token is not valid.")
    user = await request.auser()
    if not (user.is_active and user.is_staff):
        raise _denied("Give the admin token or log in as staff.")
    if permission is not None and not await user.ahas_perm(permission):
        raise APIError(
            f"Your account lacks the {permission} permission.",
            status=403,
            type="permission_error",
            code="permission_denied",
        )
    if request.method not in ("GET", "HEAD") and _csrf_rejected(request):
        raise APIError("CSRF check failed.", status=403)
    return _staff(user)


async def operator_or_anyone(request: HttpRequest) -> Caller:
    """Anyone may call; the admin token (bearer) or a staff session names an operator, who
    gets more in the answer (/health's details). Never refuses: a wrong token is anyone."""
    token = bearer(request)
    if token is not None:
        return OPERATOR if _is_admin_token(token) else ANONYMOUS
    user = await request.auser()
    return _staff(user) if user.is_active and user.is_staff else ANONYMOUS


async def metrics_reader(request: HttpRequest) -> Caller:
    """/metrics names every loaded model: with METRICS_TOKEN set, only that bearer token (or
    the admin token) may scrape it; unset, anyone may, as Prometheus' default expects."""
    wanted = settings.METRICS_TOKEN
    if not wanted:
        return ANONYMOUS
    token = bearer(request)
    if secrets.compare_digest((token or "").encode(), wanted.encode()):
        return ANONYMOUS
    if _is_admin_token(token):
        return OPERATOR
    raise APIError(
        "/metrics takes the METRICS_TOKEN (or the admin token) as a bearer token.",
        status=401,
        type="authentication_error",
        code="invalid_metrics_token",
        headers={"WWW-Authenticate": "Bearer"},
    )


async def operator_or_key(request: HttpRequest) -> Caller:
    """The admin token as a bearer token names an operator; any other bearer is an API key
    (or none, where keys are not required). For endpoints where an operator may do more, as
    Ollama's /api/pull pulls from the hub for one; serving decides what a key may not."""
    token = bearer(request)
    if _is_admin_token(token):
        return OPERATOR
    return await _key_holder(token, MISSING_KEY)


async def hold_slot(ctx: RequestContext) -> None:
    """One of the caller's concurrent requests, given back when the context closes: counted
    in this process, or across every instance on the shared database (SHARED_LIMITS)."""
    caller = ctx.caller
    # Anonymous callers have no key row to lease slots on: each instance counts its own.
    if shared_limits() and caller.key_id is not None:
        release = await shared_limiter.acquire(caller, ctx.id)
    elif limiter.try_acquire(caller):
        release = partial(limiter.release, caller)
    else:
        release = None
    if release is None:
        who = "without an API key" if caller.key_id is None else f"for API key '{caller.name}'"
        raise APIError(
            f"Too many concurrent requests {who} (limit {caller.max_concurrent}).",
            status=429,
            type="rate_limit_error",
            code="concurrency_limit_exceeded",
            headers={"Retry-After": "1"},
        )
    ctx.on_close(release)


PUBLIC = Auth("public", anyone)
API_KEY = Auth("API key", api_key, limit_concurrency=True)
ANTHROPIC_KEY = Auth("API key (x-api-key or bearer)", anthropic_key, limit_concurrency=True)
EITHER_KEY = Auth("API key (bearer or x-api-key)", either_key, limit_concurrency=True)
STAFF_OR_TOKEN = Auth("staff session or admin token", staff_or_token)
# The staff powers (catalog.CatalogModel's permissions): the admin token, or a staff session
# with the permission.
POOL_OPERATOR = Auth(
    "admin token, or a staff session with catalog.operate_pool",
    partial(staff_or_token, permission="catalog.operate_pool"),
)
PLAYGROUND = Auth(
    "admin token, or a staff session with catalog.use_playground",
    partial(staff_or_token, permission="catalog.use_playground"),
)
# Public, with more for an operator: the view reads ctx.caller.operator.
OPERATOR_OR_PUBLIC = Auth("public (details: staff session or admin token)", operator_or_anyone)
METRICS = Auth("public, or METRICS_TOKEN when set", metrics_reader)
OPERATOR_OR_KEY = Auth("admin token or API key", operator_or_key, limit_concurrency=True)
