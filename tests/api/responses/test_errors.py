"""Malformed requests to the Responses API: each gets OpenAI's error object with the right
status, param and code, and the server goes on answering valid requests after each."""

from __future__ import annotations

import json

import pytest

from apikeys.auth import Caller, limiter
from apikeys.models import ApiKey
from tests.support.helpers import assert_error
from tests.support.responses_support import RESPONSES, create, valid_response

TOOL = {"type": "function", "name": "f", "parameters": {"type": "object"}}
USER = {"role": "user", "content": "Hi"}


def built_in(kind: str) -> tuple:
    """Offering a built-in tool is fine (it is left out); forcing one cannot be answered."""
    body = {"tools": [TOOL, {"type": kind}], "tool_choice": {"type": kind}}
    return (f"forced built-in tool {kind}", body, 400, "tool_choice", None)


# (name, body merged over a valid one, or raw text; status, param, code)
BAD_REQUESTS = [
    ("not json", "{nope", 400, None, None),
    ("array body", "[1, 2]", 400, None, None),
    ("no model", json.dumps({"input": "Hi"}), 400, "model", None),
    ("no input", json.dumps({"model": "tiny"}), 400, "input", None),
    ("input empty list", {"input": []}, 400, "input", None),
    ("input empty string", {"input": ""}, 400, "input", None),
    ("empty previous_response_id", {"previous_response_id": ""}, 400, "previous_response_id", None),
    ("input a number", {"input": 5}, 400, "input", None),
    ("input an object", {"input": {"role": "user", "content": "Hi"}}, 400, "input", None),
    ("item not an object", {"input": ["Hi"]}, 400, "input.0", None),
    ("bad role", {"input": [{"role": "wizard", "content": "x"}]}, 400, "input.0.role", None),
    ("message without content", {"input": [{"role": "user"}]}, 400, "input.0.content", None),
    (
        "unknown item type",
        {"input": [{"type": "item_reference", "id": "msg_1"}]},
        400,
        "input.0.type",
        None,
    ),
    (
        "function_call_output without call_id",
        {"input": [USER, {"type": "function_call_output", "output": "42"}]},
        400,
        "input.1.call_id",
        None,
    ),
    (
        "function_call without name",
        {"input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]},
        400,
        "input.0.name",
        None,
    ),
    (
        "function_call_output for no call",
        {"input": [USER, {"type": "function_call_output", "call_id": "call_x", "output": "1"}]},
        400,
        "input.1.call_id",
        None,
    ),
    (
        "image input on a text-only model",
        {
            "input": [
                {
                    "role": "user",
                    "content": [{"type": "input_image", "image_url": "https://x/y.png"}],
                }
            ]
        },
        400,
        "input.0.content.0",
        "image_input_not_supported",
    ),
    (  # schemathesis found it: a list is not hashable, the set lookup raised (500)
        "content part type a list",
        {"input": [{"role": "user", "content": [{"type": ["input_text"], "text": "x"}]}]},
        400,
        "input.0.content.0",
        None,
    ),
    (
        "file input",
        {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
        400,
        "input.0.content.0",
        None,
    ),
    (
        "unknown content part",
        {"input": [{"role": "user", "content": [{"type": "hologram", "text": "x"}]}]},
        400,
        "input.0.content.0.type",
        None,
    ),
    (
        "text part without text",
        {"input": [{"role": "user", "content": [{"type": "input_text"}]}]},
        400,
        "input.0.content.0.text",
        None,
    ),
    built_in("web_search"),
    built_in("web_search_preview"),
    built_in("file_search"),
    built_in("computer_use_preview"),
    built_in("code_interpreter"),
    built_in("image_generation"),
    built_in("mcp"),
    built_in("local_shell"),
    ("tool without name", {"tools": [{"type": "function"}]}, 400, "tools.0.name", None),
    ("tool without type", {"tools": [{"name": "f"}]}, 400, "tools.0.type", None),
    (
        "namespace without tools",
        {"tools": [{"type": "namespace", "name": "ns", "tools": []}]},
        400,
        "tools.0.tools",
        None,
    ),
    (
        "namespace function colliding twice",
        {"tools": [TOOL, {"type": "namespace", "name": "ns", "tools": [TOOL, TOOL]}]},
        400,
        "tools",
        None,
    ),
    (
        "bad tool name",
        {"tools": [{"type": "function", "name": "a b"}]},
        400,
        "tools.0.name",
        None,
    ),
    ("duplicate tools", {"tools": [TOOL, TOOL]}, 400, "tools", None),
    (
        "tool_choice names an unknown function",
        {"tools": [TOOL], "tool_choice": {"type": "function", "name": "g"}},
        400,
        "tool_choice",
        None,
    ),
    ("required without tools", {"tool_choice": "required"}, 400, "tool_choice", None),
    (
        "tool_choice a built-in tool",
        {"tools": [TOOL], "tool_choice": {"type": "web_search_preview"}},
        400,
        "tool_choice",
        None,
    ),
    ("tool_choice unknown word", {"tool_choice": "sometimes"}, 400, "tool_choice", None),
    ("bad text.format", {"text": {"format": {"type": "yaml"}}}, 400, "text.format.type", None),
    (
        "json_schema without name",
        {"text": {"format": {"type": "json_schema", "schema": {"type": "object"}}}},
        400,
        "text.format.name",
        None,
    ),
    (
        "invalid json_schema",
        {"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "bogus"}}}},
        400,
        "text.format.schema",
        None,
    ),
    ("temperature 3", {"temperature": 3}, 400, "temperature", None),
    ("temperature a word", {"temperature": "hot"}, 400, "temperature", None),
    ("top_p 2", {"top_p": 2}, 400, "top_p", None),
    ("max_output_tokens 0", {"max_output_tokens": 0}, 400, "max_output_tokens", None),
    (
        "metadata too many keys",
        {"metadata": {f"k{i}": "v" for i in range(17)}},
        400,
        "metadata",
        None,
    ),
    ("metadata non-string value", {"metadata": {"n": 1}}, 400, "metadata", None),
    ("metadata value too long", {"metadata": {"k": "v" * 513}}, 400, "metadata", None),
    ("metadata a list", {"metadata": ["k"]}, 400, "metadata", None),
    ("reasoning effort unknown", {"reasoning": {"effort": "huge"}}, 400, "reasoning.effort", None),
    (
        "unknown previous_response_id",
        {"previous_response_id": "resp_missing"},
        404,
        "previous_response_id",
        "previous_response_not_found",
    ),
    ("background true", {"background": True}, 400, "background", None),
    ("conversation", {"conversation": "conv_1"}, 400, "conversation", None),
    ("reusable prompt", {"prompt": {"id": "pmpt_1"}}, 400, "prompt", None),
    ("instructions a number", {"instructions": 5}, 400, "instructions", None),
    ("store not a boolean", {"store": "maybe"}, 400, "store", None),
    ("user too long", {"user": "u" * 257}, 400, "user", None),
    ("model unknown", {"model": "gpt-5"}, 404, "model", "model_not_found"),
    ("model a path", {"model": "../../etc/passwd"}, 404, "model", "model_not_found"),
]


@pytest.mark.parametrize(
    ("body", "status", "param", "code"),
    [case[1:] for case in BAD_REQUESTS],
    ids=[case[0] for case in BAD_REQUESTS],
)
def test_bad_requests_get_openai_errors(client, tiny_entry, body, status, param, code):
    valid = {"model": "tiny", "input": "Hi", "max_output_tokens": 1}
    if isinstance(body, dict):
        body = json.dumps({**valid, **body})
    response = client.post(RESPONSES, body, content_type="application/json")
    assert_error(response, status, param, code)
    # And a valid request still succeeds.
    after = create(client, max_output_tokens=1)
    assert after.status_code == 200
    valid_response(after.json())


def test_the_table_is_long_enough():
    assert len(BAD_REQUESTS) >= 25


def test_max_output_tokens_over_the_model_limit(client, tiny_entry):
    tiny_entry.max_output_tokens = 8
    tiny_entry.save()
    assert_error(create(client, max_output_tokens=9), 400, "max_output_tokens", "invalid_value")
    assert create(client, max_output_tokens=8).status_code == 200


def test_context_length_exceeded(client, tiny_entry):
    tiny_entry.context_length = 8
    tiny_entry.save()
    response = create(client)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("get", RESPONSES, "POST"),
        ("put", RESPONSES, "POST"),
        ("post", f"{RESPONSES}/resp_x", "GET, DELETE"),
        ("delete", f"{RESPONSES}/resp_x/input_items", "GET"),
    ],
)
def test_wrong_methods(client, db, method, path, allowed):
    response = getattr(client, method)(path)
    assert_error(response, 405)
    assert response["Allow"] == allowed


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", f"{RESPONSES}/resp_unknown"),
        ("delete", f"{RESPONSES}/resp_unknown"),
        ("get", f"{RESPONSES}/resp_unknown/input_items"),
        ("get", f"{RESPONSES}/resp_%27%3B%20DROP%20TABLE"),
    ],
)
def test_unknown_ids_are_404s(client, db, method, path):
    error = assert_error(getattr(client, method)(path), 404)
    assert "not found" in error["message"]


@pytest.mark.parametrize(
    ("query", "param"),
    [("limit=0", "limit"), ("limit=101", "limit"), ("limit=x", "limit"), ("order=up", "order")],
)
def test_bad_input_item_queries(client, tiny_entry, query, param):
    response_id = create(client).json()["id"]
    response = client.get(f"{RESPONSES}/{response_id}/input_items?{query}")
    assert_error(response, 400, param)


def test_unknown_after_cursor(client, tiny_entry):
    response_id = create(client).json()["id"]
    response = client.get(f"{RESPONSES}/{response_id}/input_items?after=msg_nope")
    assert_error(response, 400, "after")


def test_body_too_large(client, tiny_entry, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    assert_error(create(client, input="x" * 2000), 413)


def test_keys_required_means_401(client, tiny_entry, settings):
    settings.REQUIRE_API_KEY = True
    error = assert_error(create(client), 401, code="invalid_api_key")
    assert "API key" in error["message"]
    assert_error(client.get(f"{RESPONSES}/resp_x"), 401, code="invalid_api_key")


def test_concurrency_limit_is_a_429(client, tiny_entry):
    key = ApiKey(name="busy", max_concurrent_requests=1)
    secret = key.new_secret()
    key.save()
    running = Caller(key.pk, key.name, None, 1)  # holds the key's only slot, as a request would
    assert limiter.try_acquire(running)
    try:
        body = {"model": "tiny", "input": "Hi", "max_output_tokens": 1}
        response = client.post(
            RESPONSES, body, content_type="application/json", headers=bearer(secret)
        )
    finally:
        limiter.release(running)
    assert_error(response, 429, code="concurrency_limit_exceeded")


def bearer(secret: str) -> dict:
    return {"Authorization": f"Bearer {secret}"}
