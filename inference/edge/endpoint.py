"""`@endpoint(...)`: the one declaration each view gets, and the one place that decides the
order of what happens to a request before and after its view."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import wraps

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt
from pydantic import BaseModel, ValidationError

from inference.edge.auth import PUBLIC, Auth, hold_slot
from inference.edge.body import asked_model, parse_body, validation_error
from inference.edge.dialects import OPENAI, Dialect, error_response
from inference.edge.responses import (
    ClosingStreamingResponse,
    ViewResult,
    event_stream_response,
    json_response,
)
from inference.protocol.errors import APIError, server_error
from inference.serving.context import RequestContext
from inference.serving.sse import EventStream

log = logging.getLogger(__name__)
View = Callable[..., Awaitable[ViewResult]]
CLIENT_CLOSED = 499  # nginx's status for a request whose client left before its answer

# One wire model, or a tuple of the models it may be (e.g. OpenAI's or Anthropic's model list).
Models = type[BaseModel] | tuple[type[BaseModel], ...]


@dataclass(frozen=True)
class Endpoint:
    methods: tuple[str, ...]
    body: type[BaseModel] | None
    auth: Auth
    dialect: Dialect
    record: bool  # counted in metrics, logged, listed on the dashboard
    # What the API description says it answers: the JSON model(s), per method where they
    # differ; the events of its server-sent stream (with "stream": true); none of these
    # change how a request is handled.
    response: Models | Mapping[str, Models] | None = None
    stream: Models | None = None
    # The query string's parameters, checked before the view like a body (400 in the dialect).
    query: type[BaseModel] | None = None


def endpoint(
    *methods: str,
    body: type[BaseModel] | None = None,
    auth: Auth = PUBLIC,
    dialect: Dialect = OPENAI,
    record: bool = False,
    response: Models | Mapping[str, Models] | None = None,
    stream: Models | None = None,
    query: type[BaseModel] | None = None,
) -> Callable[[View], Callable[..., Awaitable[HttpResponse]]]:
    """The view is called as `view(request, ctx, **url_kwargs)`, plus `body=` when a body
    model is declared, once the method, the caller, the query and the body have passed. It
    returns a wire model, a dict, an EventStream or a response, or raises APIError.
    `response`, `stream` and `query` also feed /openapi.json (inference/openapi.py)."""
    spec = Endpoint(methods, body, auth, dialect, record, response, stream, query)

    def decorate(view: View) -> Callable[..., Awaitable[HttpResponse]]:
        @csrf_exempt  # /v1 is called with keys, not cookies; staff writes check CSRF in auth
        @wraps(view)
        async def handle(request: HttpRequest, **kwargs) -> HttpResponse:
            ctx = _context(request, spec)
            try:
                response = await _respond(spec, view, request, ctx, kwargs)
            except BaseException:  # cancelled: the client left while the view ran
                if ctx.record is not None:
                    ctx.record.status = CLIENT_CLOSED
                ctx.close()
                raise
            return _hand_over(response, ctx)

        handle.endpoint = spec  # type: ignore[attr-defined]
        return handle

    return decorate


def _context(request: HttpRequest, spec: Endpoint) -> RequestContext:
    match = request.resolver_match
    route = "/" + match.route if match is not None else request.path
    return RequestContext.recorded(route) if spec.record else RequestContext(route)


async def _respond(
    spec: Endpoint, view: View, request: HttpRequest, ctx: RequestContext, kwargs: dict
) -> HttpResponse:
    if request.method not in spec.methods:
        allowed = ", ".join(spec.methods)
        error = APIError(
            f"Method {request.method} is not allowed here.", status=405, headers={"Allow": allowed}
        )
        return error_response(spec.dialect, error)
    known = False  # whether the caller passed: a refused stranger's body is read only if small
    try:
        ctx.identify(await spec.auth.check(request))
        known = True
        if spec.auth.limit_concurrency:
            await hold_slot(ctx)
        if spec.query is not None:
            _check_query(request, spec.query)
        if spec.body is not None:
            kwargs["body"] = parse_body(request, spec.body)
            if ctx.record is not None:
                ctx.record.stream = bool(getattr(kwargs["body"], "stream", False))
                model = getattr(kwargs["body"], "model", None)
                ctx.record.asked_model = model if isinstance(model, str) else ""
        return _render(await view(request, ctx, **kwargs), spec.dialect)
    except APIError as exc:
        if ctx.record is not None:
            ctx.record.error_code = exc.code
            if spec.body is not None and "body" not in kwargs:  # refused before it was read
                ctx.record.asked_model = asked_model(request, whole=known)
        return error_response(spec.dialect, exc)
    except Exception:
        log.exception("unhandled error in %s", request.path)
        return error_response(spec.dialect, server_error())


def _check_query(request: HttpRequest, schema: type[BaseModel]) -> None:
    """The view still reads request.GET; this makes sure what the API description promises
    holds before it runs (the last value of a repeated parameter, as request.GET.get gives)."""
    try:
        schema.model_validate(request.GET.dict())
    except ValidationError as exc:
        raise validation_error(exc) from None


def _render(result: ViewResult, dialect: Dialect) -> HttpResponse:
    if isinstance(result, HttpResponseBase):  # a response it made itself (a file's content too)
        return result  # type: ignore[return-value]
    if isinstance(result, EventStream):
        return event_stream_response(result)
    if isinstance(result, BaseModel):
        return json_response(result)
    return JsonResponse(result)


def _hand_over(response: HttpResponse, ctx: RequestContext) -> HttpResponse:
    """The context closes now, or when Django closes the stream (finished, failed, or the
    client gone): the key's slot, the engine's jobs and the record are released exactly once."""
    if ctx.record is not None:
        ctx.record.status = response.status_code
        response["X-Request-ID"] = ctx.id
    if response.status_code < 400:  # what serving said about an answer, not about an error
        for name, value in ctx.headers.items():
            response[name] = value
    if isinstance(response, ClosingStreamingResponse):
        response.on_close(ctx.close)
    else:
        ctx.close()
    return response
