"""Small decorators that keep /v1 views about the happy path (in the spirit of healthchecks)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from functools import wraps

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from pydantic import BaseModel, ValidationError

from inference.http import error_response
from inference.observability import records
from inference.observability.records import RequestRecord
from inference.protocol.errors import APIError, server_error

log = logging.getLogger(__name__)
View = Callable[..., Awaitable[HttpResponse]]


def openai_api(*methods: str, record: bool = True) -> Callable[[View], View]:
    """Method check, every failure turned into an OpenAI error object, and (with `record`)
    the request counted, logged and listed once its response is finished."""

    def decorate(view: View) -> View:
        @csrf_exempt
        @wraps(view)
        async def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if not record:
                return await _answer(view, methods, request, *args, **kwargs)
            entry = RequestRecord(endpoint="/" + request.resolver_match.route)
            token = records.current.set(entry)
            try:
                response = await _answer(view, methods, request, *args, **kwargs)
            finally:
                records.current.reset(token)
            entry.status = response.status_code
            response["X-Request-ID"] = entry.id
            if response.streaming:
                response._resource_closers.append(entry.finish)
            else:
                entry.finish()
            return response

        return wrapper

    return decorate


async def _answer(
    view: View, methods: tuple[str, ...], request: HttpRequest, *args, **kwargs
) -> HttpResponse:
    if request.method not in methods:
        response = error_response(
            APIError(f"Method {request.method} is not allowed here.", status=405)
        )
        response["Allow"] = ", ".join(methods)
        return response
    try:
        return await view(request, *args, **kwargs)
    except APIError as exc:
        if entry := records.current.get():
            entry.error_code = exc.code
        return error_response(exc)
    except Exception:
        log.exception("unhandled error in %s", request.path)
        return error_response(server_error())


def json_body(schema: type[BaseModel]) -> Callable[[View], View]:
    """Parses and validates the body; the view receives the model instance as `body`."""

    def decorate(view: View) -> View:
        @wraps(view)
        async def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            body = parse_body(request, schema)
            if entry := records.current.get():
                entry.stream = bool(getattr(body, "stream", False))
            return await view(request, *args, body=body, **kwargs)

        return wrapper

    return decorate


def parse_body(request: HttpRequest, schema: type[BaseModel]) -> BaseModel:
    try:
        raw = request.body
    except RequestDataTooBig:
        raise APIError("The request body is too large.", status=413) from None
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise APIError("We could not parse the JSON body of your request.") from None
    if not isinstance(data, dict):
        raise APIError("The request body must be a JSON object.")
    try:
        parsed = schema.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None
    if parsed.model_extra:
        log.warning("ignoring unknown fields: %s", ", ".join(sorted(parsed.model_extra)))
    return parsed


# Labels pydantic puts in an error's location for union members and validators, not fields.
_NOT_FIELDS = re.compile(r"[\[\]-]|^(str|int|float|bool|list|dict|none)$")


def validation_error(exc: ValidationError) -> APIError:
    first = exc.errors(include_url=False)[0]
    if first["type"] == "invalid_param":  # a validator that knows which param is wrong
        return APIError(first["msg"], param=first["ctx"]["param"])
    parts: list[str] = []
    for part in first["loc"]:
        if isinstance(part, str) and _NOT_FIELDS.search(part):
            break
        parts.append(str(part))
    param = ".".join(parts) or None
    message = first["msg"]
    return APIError(f"Invalid value for '{param}': {message}" if param else message, param=param)
