"""/control: the operator's API on the running server (admin token or staff session)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from functools import wraps

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware

from inference.decorators import View, openai_api
from inference.http import error_response
from inference.protocol.errors import APIError
from inference.serving.control import inject_fault, pool_status, unload_model, warm_model


def _bearer(request: HttpRequest) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def staff_or_token(view: View) -> View:
    """The admin token as a bearer token, or a staff member's session (with CSRF for writes)."""

    @wraps(view)
    async def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        token = _bearer(request)
        if token is not None:
            if secrets.compare_digest(token.encode(), settings.ADMIN_TOKEN.encode()):
                return await view(request, *args, **kwargs)
            return error_response(_denied("The admin token is not valid."))
        user = await request.auser()
        if not (user.is_active and user.is_staff):
            return error_response(_denied("Give the admin token or log in as staff."))
        if request.method not in ("GET", "HEAD"):
            rejected = CsrfViewMiddleware(lambda r: None).process_view(request, None, (), {})
            if rejected is not None:
                return error_response(APIError("CSRF check failed.", status=403))
        return await view(request, *args, **kwargs)

    return wrapper


def _denied(message: str) -> APIError:
    return APIError(message, status=401, type="authentication_error", code="invalid_admin_token")


def control_api(*methods: str) -> Callable[[View], View]:
    def decorate(view: View) -> View:
        return openai_api(*methods, record=False)(staff_or_token(view))

    return decorate


@control_api("GET")
async def pool(request: HttpRequest) -> HttpResponse:
    return JsonResponse(await pool_status())


@control_api("POST")
async def engine_fault(request: HttpRequest) -> HttpResponse:
    """Recovery drills: {"kind": "crash"} or {"kind": "stall", "seconds": N}. Off unless
    ENGINE_FAULT_INJECTION is set."""
    if not settings.ENGINE_FAULT_INJECTION:
        raise APIError("Fault injection is off on this server.", status=404, code="unknown_url")
    try:
        fault = json.loads(request.body)
        injected = inject_fault(fault["kind"], float(fault.get("seconds", 0)))
    except (ValueError, KeyError, TypeError):
        raise APIError('Send {"kind": "crash"} or {"kind": "stall", "seconds": N}.') from None
    return JsonResponse({"injected": injected})


@control_api("POST")
async def warm(request: HttpRequest, model_id: str) -> HttpResponse:
    return JsonResponse(await warm_model(model_id))


@control_api("POST")
async def unload(request: HttpRequest, model_id: str) -> HttpResponse:
    return JsonResponse(await unload_model(model_id))
