"""GET /openapi.json: the API description, generated from what each view under /v1 declares
with `@endpoint` (methods, body, auth, dialect, response, stream, query) and from its URL
pattern (the path and its parameters). Nothing here names a route: a view declared with
`@endpoint` and given a URL in inference/urls.py appears by itself."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, get_type_hints

from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.converters import IntConverter
from django.urls.resolvers import RoutePattern
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from inference.edge.auth import (
    ANTHROPIC_KEY,
    API_KEY,
    EITHER_KEY,
    METRICS,
    OPERATOR_OR_KEY,
    OPERATOR_OR_PUBLIC,
    PLAYGROUND,
    POOL_OPERATOR,
    PUBLIC,
    STAFF_OR_TOKEN,
    Auth,
)
from inference.edge.dialects import Dialect
from inference.edge.endpoint import Endpoint, Models

# The client API: what inference/urls.py mounts. Probes, /metrics, /control and the dashboard
# are the operator's, and the /v1 catch-all (a regex route) is no operation of its own.
API_PREFIX = "/v1/"
REF = "#/components/schemas/{model}"
SCHEMES = {
    "bearer": {"type": "http", "scheme": "bearer", "description": "An API key"},
    "x-api-key": {"type": "apiKey", "in": "header", "name": "x-api-key"},
}
# Each policy's ways in, as OpenAPI requirements (any one of them will do).
SECURITY: dict[Auth, list[dict]] = {
    PUBLIC: [],
    API_KEY: [{"bearer": []}],
    ANTHROPIC_KEY: [{"x-api-key": []}, {"bearer": []}],
    EITHER_KEY: [{"bearer": []}, {"x-api-key": []}],
    STAFF_OR_TOKEN: [{"bearer": []}],  # the admin token (or a staff session's cookie)
    POOL_OPERATOR: [{"bearer": []}],  # the same, the session with its permission
    PLAYGROUND: [{"bearer": []}],
    OPERATOR_OR_KEY: [{"bearer": []}],  # an API key, or the admin token
    # The probes and /metrics stay out of the document; listed so that every policy is.
    OPERATOR_OR_PUBLIC: [{}, {"bearer": []}],
    METRICS: [{}, {"bearer": []}],
}
_PARAMETER = re.compile(r"<(?:[^>:]+:)?([^>]+)>")
Refs = dict[tuple[type[BaseModel], JsonSchemaMode], dict]


@dataclass(frozen=True)
class Route:
    """One declared view at one URL: its OpenAPI path template and path parameters."""

    path: str
    view: Callable
    parameters: list[dict] = field(default_factory=list)

    @property
    def spec(self) -> Endpoint:
        return self.view.endpoint  # type: ignore[attr-defined]


def declared_routes(urlconf: str | None = None) -> Iterator[Route]:
    """Every `@endpoint` view under API_PREFIX in the URLconf, in its order."""
    yield from _walk(get_resolver(urlconf).url_patterns, "/", [])


def _walk(entries: Sequence, prefix: str, parameters: list[dict]) -> Iterator[Route]:
    for entry in entries:
        if not isinstance(entry.pattern, RoutePattern):
            continue  # a regex has no OpenAPI path template: only the catch-all is one
        route, more = _template(entry.pattern)
        path = prefix + route
        if not (path.startswith(API_PREFIX) or API_PREFIX.startswith(path)):
            continue
        if isinstance(entry, URLResolver):
            yield from _walk(entry.url_patterns, path, parameters + more)
        elif isinstance(entry, URLPattern) and hasattr(entry.callback, "endpoint"):
            yield Route(path, entry.callback, parameters + more)


def _template(pattern: RoutePattern) -> tuple[str, list[dict]]:
    """`models/<str:model_id>` -> `models/{model_id}` and its parameter, typed by its
    converter (the converter's own regex, so a generated value is one the URL matches)."""
    parameters = []
    for name, converter in pattern.converters.items():
        if isinstance(converter, IntConverter):
            schema: dict[str, Any] = {"type": "integer", "minimum": 0}
        else:
            schema = {"type": "string", "pattern": f"^{converter.regex}$"}
        parameters.append({"name": name, "in": "path", "required": True, "schema": schema})
    return _PARAMETER.sub(r"{\1}", str(pattern)), parameters


def build_document(urlconf: str | None = None) -> dict:
    routes = list(declared_routes(urlconf))
    refs, schemas = _components(routes)
    paths: dict[str, dict] = {}
    for route in routes:
        paths.setdefault(route.path, {}).update(_operations(route, refs, schemas))
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "mlx-django-server",
            "version": "1",
            "description": "OpenAI-compatible API (and Anthropic's Messages API)",
        },
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": SCHEMES},
    }


@cache
def openapi_document() -> dict:
    return build_document()


def _models(models: Models | None) -> tuple[type[BaseModel], ...]:
    if models is None:
        return ()
    return models if isinstance(models, tuple) else (models,)


def _answers(spec: Endpoint) -> tuple[type[BaseModel], ...]:
    response = spec.response
    per_method = response.values() if isinstance(response, Mapping) else [response]
    return tuple(m for models in per_method for m in _models(models)) + _models(spec.stream)


def error_model(dialect: Dialect) -> type[BaseModel]:
    """The dialect's error body, as its error_body function's return type says."""
    return get_type_hints(dialect.error_body)["return"]


def _components(routes: list[Route]) -> tuple[Refs, dict]:
    """Every model the routes name, as components/schemas (requests as pydantic validates
    them, answers as it serializes them), and the reference to each."""
    wanted: dict[tuple[type[BaseModel], JsonSchemaMode], None] = {}
    for route in routes:
        spec = route.spec
        for model in (spec.body, spec.query):
            if model is not None:
                wanted[(model, "validation")] = None
        for model in (*_answers(spec), error_model(spec.dialect)):
            wanted[(model, "serialization")] = None
    refs, schemas = models_json_schema(list(wanted), ref_template=REF)
    return refs, schemas.get("$defs", {})


def _either(models: Models, mode: JsonSchemaMode, refs: Refs) -> dict:
    found = [refs[(model, mode)] for model in _models(models)]
    return found[0] if len(found) == 1 else {"anyOf": found}


def _operations(route: Route, refs: Refs, schemas: dict) -> dict[str, dict]:
    spec, view = route.spec, route.view
    doc = (view.__doc__ or view.__name__.replace("_", " ").capitalize()).strip()
    operations = {}
    for method in spec.methods:
        one = len(spec.methods) == 1
        operation: dict[str, Any] = {
            "operationId": view.__name__ if one else f"{view.__name__}_{method.lower()}",
            "summary": " ".join(doc.split("\n\n")[0].split()),
            "tags": [spec.dialect.name],
            "responses": _responses(spec, method, refs),
        }
        parameters = route.parameters + _query_parameters(spec, refs, schemas)
        if parameters:
            operation["parameters"] = parameters
        if spec.body is not None:
            schema = refs[(spec.body, "validation")]
            content = {"application/json": {"schema": schema}}
            operation["requestBody"] = {"required": True, "content": content}
        if SECURITY[spec.auth]:
            operation["security"] = SECURITY[spec.auth]
        operations[method.lower()] = operation
    return operations


def _query_parameters(spec: Endpoint, refs: Refs, schemas: dict) -> list[dict]:
    if spec.query is None:
        return []
    name = refs[(spec.query, "validation")]["$ref"].rsplit("/", 1)[1]
    schema = schemas[name]
    required = set(schema.get("required", ()))
    return [
        {"name": key, "in": "query", "required": key in required, "schema": value}
        for key, value in schema["properties"].items()
    ]


def _responses(spec: Endpoint, method: str, refs: Refs) -> dict[str, dict]:
    """The answer, then the errors the declaration itself implies, then any other 4xx/5xx,
    all in the dialect's error body."""
    response = spec.response
    models = response.get(method) if isinstance(response, Mapping) else response
    content = {}
    if models:
        content["application/json"] = {"schema": _either(models, "serialization", refs)}
    if spec.stream is not None:
        content["text/event-stream"] = {"schema": _either(spec.stream, "serialization", refs)}
    answer: dict[str, Any] = {"description": "The answer"}
    if spec.stream is not None:
        answer["description"] += ", or with stream: true its server-sent events"
    if content:
        answer["content"] = content
    error = {"application/json": {"schema": refs[(error_model(spec.dialect), "serialization")]}}
    return {"200": answer} | {
        status: {"description": description, "content": error}
        for status, description in _errors(spec)
    }


def _errors(spec: Endpoint) -> list[tuple[str, str]]:
    errors = []
    if spec.body is not None or spec.query is not None:
        errors.append(("400", "The request is not valid"))
    if SECURITY[spec.auth]:
        errors.append(("401", "No valid API key"))
    if spec.body is not None:
        errors.append(("413", "The request body is too large"))
    if spec.auth.limit_concurrency:
        errors.append(("429", "The key's concurrent requests are all in use"))
    return [*errors, ("4XX", "Another client error"), ("5XX", "A server error")]
