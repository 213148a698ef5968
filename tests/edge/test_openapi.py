"""/openapi.json is generated from the `@endpoint` declarations and the URL patterns: every
declared /v1 URL appears with its methods, its body as pydantic validates it, its auth as a
security requirement and its dialect's error body; a new declared route needs no other edit.

This module is also the URLconf of the tests that add a route (`urlpatterns` below)."""

from __future__ import annotations

import re

import pytest
import schemathesis
from django.http import HttpRequest
from django.urls import URLPattern, URLResolver, get_resolver, path
from django.urls.resolvers import RoutePattern
from pydantic import BaseModel, Field
from schemathesis.core.result import Ok

import config.urls
from inference import views
from inference.edge import endpoint
from inference.edge.auth import ANTHROPIC_KEY
from inference.edge.dialects import ANTHROPIC
from inference.openapi import REF, build_document, declared_routes
from inference.protocol.anthropic.errors import AnthropicErrorResponse
from inference.protocol.openai.errors import ErrorResponse
from inference.protocol.openai.models import ModelCard
from inference.serving.context import RequestContext

OLD_PATHS = {  # the hand-written document's, before it was generated
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/models",
    "/v1/models/{model}",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/responses",
    "/v1/responses/{response_id}",
    "/v1/responses/{response_id}/input_items",
}
ADDED_PATHS = {  # endpoints added since
    "/v1/tokenize",
    "/v1/detokenize",
    "/v1/apply-template",
    "/v1/rerank",
}
# The Files and Batch API and Anthropic's Message Batches (issue 46): each path's operations.
BATCH_PATHS = {
    "/v1/files": 2,
    "/v1/files/{file_id}": 2,
    "/v1/files/{file_id}/content": 1,
    "/v1/batches": 2,
    "/v1/batches/{batch_id}": 1,
    "/v1/batches/{batch_id}/cancel": 1,
    "/v1/messages/batches": 2,
    "/v1/messages/batches/{batch_id}": 2,
    "/v1/messages/batches/{batch_id}/cancel": 1,
    "/v1/messages/batches/{batch_id}/results": 1,
}


class GadgetQuery(BaseModel):
    size: int = Field(3, ge=1, le=9)
    colour: str | None = None


class GadgetCreate(BaseModel):
    name: str = Field(min_length=1)


@endpoint(
    "GET",
    "PUT",
    body=None,
    auth=ANTHROPIC_KEY,
    dialect=ANTHROPIC,
    response={"GET": ModelCard},
    query=GadgetQuery,
)
async def gadget(request: HttpRequest, ctx: RequestContext, gadget_id: int) -> dict:
    """One gadget, by number.

    A route that exists only in this test."""
    return {"id": f"gadget-{gadget_id}", "object": "model", "created": 0, "owned_by": "test"}


@endpoint("POST", body=GadgetCreate)
async def gadgets(request: HttpRequest, ctx: RequestContext, body: GadgetCreate) -> dict:
    return {"name": body.name}


urlpatterns = [
    path("v1/gadgets/<int:gadget_id>", gadget),
    path("v1/gadgets", gadgets),
    *config.urls.urlpatterns,
]


def served(client) -> dict:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    return response.json()


def api_routes():
    """(route, view) of every URL under v1/, found here without inference/openapi.py."""

    def walk(entries, prefix, regex):
        for entry in entries:
            route = prefix + str(entry.pattern)
            is_regex = regex or not isinstance(entry.pattern, RoutePattern)
            if isinstance(entry, URLResolver) and entry.app_name != "admin":
                yield from walk(entry.url_patterns, route, is_regex)
            elif isinstance(entry, URLPattern) and route.startswith("v1/"):
                yield route, entry.callback, is_regex

    return list(walk(get_resolver().url_patterns, "", False))


def test_openapi_document(client, db):
    document = served(client)
    assert document["openapi"].startswith("3.1")
    schemas = document["components"]["schemas"]
    refs = set()

    def walk(node):
        if isinstance(node, dict):
            if "$ref" in node:
                refs.add(node["$ref"].rsplit("/", 1)[1])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    assert refs <= set(schemas)  # every reference resolves
    request = schemas["ChatCompletionRequest"]
    assert {"model", "messages", "temperature", "tools", "response_format"} <= set(
        request["properties"]
    )
    assert request["properties"]["temperature"]["anyOf"][0]["maximum"] == 2.0
    assert "prompt" in schemas["CompletionRequest"]["properties"]


def test_the_paths_are_the_old_documents_with_the_url_patterns_names(client, db):
    paths = set(served(client)["paths"])
    # The one difference: the model's path parameter is named as inference/urls.py names it.
    renamed = OLD_PATHS - {"/v1/models/{model}"} | {"/v1/models/{model_id}"}
    assert paths == renamed | ADDED_PATHS | set(BATCH_PATHS)


def test_every_declared_api_url_appears_with_its_methods(client, db):
    paths = served(client)["paths"]
    routes = api_routes()
    assert len(routes) >= 10
    for route, view, is_regex in routes:
        assert hasattr(view, "endpoint"), route
        if is_regex:  # the catch-all 404 has no path template, and is no operation
            assert view is views.not_found
            continue
        template = "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)
        assert set(paths[template]) == {m.lower() for m in view.endpoint.methods}, route


def test_operator_routes_and_probes_stay_out(client, db):
    paths = served(client)["paths"]
    for route in ("/health", "/health/ready", "/metrics", "/openapi.json", "/control/pool"):
        assert route not in paths
    assert not [p for p in paths if not p.startswith("/v1/")]


def same_schema(ours: object, theirs: object, schemas: dict, defs: dict, pairs: dict) -> bool:
    """Whether the document's schema is the model's own, walking both in step. pydantic may
    rename a definition in the document (two models named FunctionCall): each of the model's
    definitions must then always be reached as the same one of the document's, with the same
    content (`pairs` holds what has been matched, so a recursive model ends)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        if ours.keys() != theirs.keys():
            return False
        if "$ref" in ours:
            mine, other = ours["$ref"].rsplit("/", 1)[1], theirs["$ref"].rsplit("/", 1)[1]
            if other not in pairs:
                if mine in pairs.values():
                    return False
                pairs[other] = mine
                if not same_schema(schemas[mine], defs[other], schemas, defs, pairs):
                    return False
            elif pairs[other] != mine:
                return False
        return all(
            same_schema(ours[k], theirs[k], schemas, defs, pairs) for k in ours if k != "$ref"
        )
    if isinstance(ours, list) and isinstance(theirs, list):
        return len(ours) == len(theirs) and all(
            same_schema(a, b, schemas, defs, pairs) for a, b in zip(ours, theirs, strict=True)
        )
    return ours == theirs


def test_request_schemas_match_the_pydantic_models(client, db):
    document = served(client)
    schemas = document["components"]["schemas"]
    bodies = {route.path: route.spec.body for route in declared_routes() if route.spec.body}
    assert len(bodies) >= 6
    for url, model in bodies.items():
        ref = document["paths"][url]["post"]["requestBody"]["content"]["application/json"]
        assert ref["schema"] == {"$ref": REF.format(model=model.__name__)}, url
        expected = model.model_json_schema(mode="validation", ref_template=REF)
        defs = expected.pop("$defs", {})
        assert same_schema(schemas[model.__name__], expected, schemas, defs, {}), url
    # and the comparison is not blind to a difference
    chat = bodies["/v1/chat/completions"].model_json_schema(ref_template=REF)
    chat["properties"]["temperature"] = {"type": "string"}
    defs = chat.pop("$defs")
    assert not same_schema(schemas["ChatCompletionRequest"], chat, schemas, defs, {})


def test_security_and_errors_follow_auth_and_dialect(client, db):
    paths = served(client)["paths"]
    chat, messages = paths["/v1/chat/completions"]["post"], paths["/v1/messages"]["post"]
    models = paths["/v1/models"]["get"]
    assert chat["security"] == [{"bearer": []}]
    assert messages["security"] == [{"x-api-key": []}, {"bearer": []}]
    assert models["security"] == [{"bearer": []}, {"x-api-key": []}]
    for operation, error in ((chat, ErrorResponse), (messages, AnthropicErrorResponse)):
        for status in ("400", "401", "413", "429", "4XX", "5XX"):
            content = operation["responses"][status]["content"]["application/json"]
            assert content["schema"] == {"$ref": REF.format(model=error.__name__)}, status
    answer = chat["responses"]["200"]["content"]
    assert answer["application/json"]["schema"]["$ref"].endswith("/ChatCompletion")
    assert answer["text/event-stream"]["schema"]["$ref"].endswith("/ChatCompletionChunk")
    listed = models["responses"]["200"]["content"]["application/json"]["schema"]["anyOf"]
    assert {ref["$ref"].rsplit("/", 1)[1] for ref in listed} == {"ModelList", "AnthropicModelList"}
    detail = paths["/v1/responses/{response_id}"]
    assert detail["get"]["responses"]["200"]["content"]["application/json"]["schema"][
        "$ref"
    ].endswith("/ResponseObject")
    assert detail["delete"]["responses"]["200"]["content"]["application/json"]["schema"][
        "$ref"
    ].endswith("/DeletedResponse")


def test_path_and_query_parameters(client, db):
    paths = served(client)["paths"]
    (model_id,) = paths["/v1/models/{model_id}"]["get"]["parameters"]
    assert model_id == {
        "name": "model_id",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": "^[^/]+$"},
    }
    items = paths["/v1/responses/{response_id}/input_items"]["get"]["parameters"]
    by_name = {parameter["name"]: parameter for parameter in items}
    assert list(by_name) == ["response_id", "limit", "order", "after"]
    assert by_name["limit"]["in"] == "query" and not by_name["limit"]["required"]
    assert (by_name["limit"]["schema"]["minimum"], by_name["limit"]["schema"]["maximum"]) == (
        1,
        100,
    )
    assert by_name["order"]["schema"]["enum"] == ["asc", "desc"]


def test_a_route_declared_with_endpoint_appears_without_editing_openapi():
    document = build_document(__name__)
    served_paths = set(build_document()["paths"])
    assert set(document["paths"]) == served_paths | {"/v1/gadgets/{gadget_id}", "/v1/gadgets"}
    one = document["paths"]["/v1/gadgets/{gadget_id}"]
    assert set(one) == {"get", "put"}
    get = one["get"]
    assert get["operationId"] == "gadget_get" and get["summary"] == "One gadget, by number."
    assert get["tags"] == ["anthropic"]
    assert get["security"] == [{"x-api-key": []}, {"bearer": []}]
    assert [(p["name"], p["in"], p["schema"].get("type")) for p in get["parameters"]] == [
        ("gadget_id", "path", "integer"),
        ("size", "query", "integer"),
        ("colour", "query", None),  # anyOf string, null
    ]
    assert get["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/ModelCard"
    )
    assert "content" not in one["put"]["responses"]["200"]  # no model declared for PUT
    error = get["responses"]["4XX"]["content"]["application/json"]["schema"]
    assert error == {"$ref": REF.format(model="AnthropicErrorResponse")}
    create = document["paths"]["/v1/gadgets"]["post"]
    assert create["operationId"] == "gadgets" and "security" not in create
    body = create["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": REF.format(model="GadgetCreate")}
    assert document["components"]["schemas"]["GadgetCreate"]["properties"]["name"]["minLength"] == 1


@pytest.mark.urls(__name__)
def test_a_declared_query_is_checked_before_the_view(client, db):
    assert client.get("/v1/gadgets/7?size=4").json()["id"] == "gadget-7"
    refused = client.get("/v1/gadgets/7?size=10")
    assert refused.status_code == 400
    assert refused.json()["type"] == "error"  # in the endpoint's (Anthropic's) dialect
    assert "size" in refused.json()["error"]["message"]


def test_schemathesis_reads_every_operation(client, db):
    schema = schemathesis.openapi.from_dict(served(client))
    results = list(schema.get_all_operations())
    assert all(isinstance(result, Ok) for result in results)
    operations = {(r.ok().method.upper(), r.ok().path) for r in results}
    assert ("DELETE", "/v1/responses/{response_id}") in operations
    # Each added path: one POST; the batch paths as listed.
    assert len(operations) == 11 + len(ADDED_PATHS) + sum(BATCH_PATHS.values())
