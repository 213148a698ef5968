"""Malformed Messages requests: each gets its status and Anthropic's error body
({"type": "error", "error": {"type", "message"}}), and the server answers the next one."""

from __future__ import annotations

import json

import pytest
from anthropic.types import Message

from apikeys.models import ApiKey

MESSAGES = "/v1/messages"
COUNT = "/v1/messages/count_tokens"
HI = [{"role": "user", "content": "Hi"}]
DROP = object()  # a row's value that removes the field from the valid body
TOOL = {"name": "f", "input_schema": {"type": "object"}}


def user(*blocks: dict) -> dict:
    return {"messages": [{"role": "user", "content": list(blocks)}]}


IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}
BAD = "invalid_request_error"

# (name, endpoint, body: overrides of a valid body or raw text, status, error type,
#  words the message must contain, how: method / headers / settings for the row)
ROWS = [
    ("missing max_tokens", MESSAGES, {"max_tokens": DROP}, 400, BAD, "max_tokens", {}),
    ("max_tokens zero", MESSAGES, {"max_tokens": 0}, 400, BAD, "max_tokens", {}),
    ("max_tokens a word", MESSAGES, {"max_tokens": "ten"}, 400, BAD, "max_tokens", {}),
    ("missing model", MESSAGES, {"model": DROP}, 400, BAD, "model", {}),
    ("empty model", MESSAGES, {"model": ""}, 400, BAD, "model", {}),
    ("missing messages", MESSAGES, {"messages": DROP}, 400, BAD, "messages", {}),
    ("empty messages", MESSAGES, {"messages": []}, 400, BAD, "messages", {}),
    (
        "only a system message",
        MESSAGES,
        {"messages": [{"role": "system", "content": "x"}]},
        400,
        BAD,
        "needs a user message",
        {},
    ),
    (
        "a tool_use in a system message",
        MESSAGES,
        {
            "messages": [
                {"role": "user", "content": "Hi"},
                {
                    "role": "system",
                    "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
                },
            ]
        },
        400,
        BAD,
        "system messages hold text blocks only",
        {},
    ),
    (
        "content a number",
        MESSAGES,
        {"messages": [{"role": "user", "content": 5}]},
        400,
        BAD,
        "messages.0.content",
        {},
    ),
    (
        "content no blocks",
        MESSAGES,
        {"messages": [{"role": "user", "content": []}]},
        400,
        BAD,
        "messages.0.content",
        {},
    ),
    ("image block", MESSAGES, user(IMAGE), 400, BAD, "not supported", {}),
    (
        "document block",
        MESSAGES,
        user({"type": "document", "source": {"type": "text", "data": "x"}}),
        400,
        BAD,
        "document blocks are not supported",
        {},
    ),
    ("unknown block type", MESSAGES, user({"type": "video", "url": "x"}), 400, BAD, "video", {}),
    ("block without type", MESSAGES, user({"text": "x"}), 400, BAD, "messages.0.content", {}),
    (
        "tool_result without tool_use_id",
        MESSAGES,
        user({"type": "tool_result", "content": "x"}),
        400,
        BAD,
        "tool_use_id",
        {},
    ),
    (
        "tool_use from the user",
        MESSAGES,
        user({"type": "tool_use", "id": "t", "name": "f", "input": {}}),
        400,
        BAD,
        "assistant messages",
        {},
    ),
    (
        "tool_use without input",
        MESSAGES,
        {
            "messages": [
                *HI,
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f"}]},
                *HI,
            ]
        },
        400,
        BAD,
        "input",
        {},
    ),
    (
        "prefill ending in tool_use",
        MESSAGES,
        {
            "messages": [
                *HI,
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
                },
            ]
        },
        400,
        BAD,
        "tool_result",
        {},
    ),
    (
        "prefill alone",
        MESSAGES,
        {"messages": [{"role": "assistant", "content": "Sure"}]},
        400,
        BAD,
        "user message",
        {},
    ),
    ("bad tool name", MESSAGES, {"tools": [{**TOOL, "name": "a b"}]}, 400, BAD, "tools.0.name", {}),
    ("duplicate tool names", MESSAGES, {"tools": [TOOL, TOOL]}, 400, BAD, "unique", {}),
    ("tool without schema", MESSAGES, {"tools": [{"name": "f"}]}, 400, BAD, "input_schema", {}),
    (
        "tool schema not an object",
        MESSAGES,
        {"tools": [{"name": "f", "input_schema": {"type": "string"}}]},
        400,
        BAD,
        "type 'object'",
        {},
    ),
    (
        "forced tool with a broken schema",
        MESSAGES,
        {
            "tools": [{"name": "f", "input_schema": {"type": "object", "properties": {"a": 5}}}],
            "tool_choice": {"type": "tool", "name": "f"},
        },
        400,
        BAD,
        "schema",
        {},
    ),
    (
        "tool_choice names an unknown tool",
        MESSAGES,
        {"tools": [TOOL], "tool_choice": {"type": "tool", "name": "g"}},
        400,
        BAD,
        "'g'",
        {},
    ),
    (
        "tool_choice any without tools",
        MESSAGES,
        {"tool_choice": {"type": "any"}},
        400,
        BAD,
        "any",
        {},
    ),
    (
        "tool_choice of an unknown type",
        MESSAGES,
        {"tools": [TOOL], "tool_choice": {"type": "required"}},
        400,
        BAD,
        "tool_choice",
        {},
    ),
    *[
        (
            f"forced server tool {kind}",
            MESSAGES,
            {
                "tools": [TOOL, {"type": kind, "name": name}],
                "tool_choice": {"type": "tool", "name": name},
            },
            400,
            BAD,
            f"forces the server tool '{name}'",
            {},
        )
        for kind, name in [
            ("web_search_20250305", "web_search"),
            ("bash_20250124", "bash"),
            ("text_editor_20250124", "str_replace_editor"),
            ("computer_20250124", "computer"),
        ]
    ],
    (
        "thinking budget too small",
        MESSAGES,
        {"thinking": {"type": "enabled", "budget_tokens": 100}},
        400,
        BAD,
        "at least 1024",
        {},
    ),
    (
        "thinking budget not below max_tokens",
        MESSAGES,
        {"max_tokens": 2000, "thinking": {"type": "enabled", "budget_tokens": 2000}},
        400,
        BAD,
        "less than max_tokens",
        {},
    ),
    (
        "thinking of an unknown type",
        MESSAGES,
        {"thinking": {"type": "deep"}},
        400,
        BAD,
        "thinking",
        {},
    ),
    ("temperature 1.5", MESSAGES, {"temperature": 1.5}, 400, BAD, "temperature", {}),
    ("temperature a word", MESSAGES, {"temperature": "hot"}, 400, BAD, "temperature", {}),
    ("top_p 2", MESSAGES, {"top_p": 2}, 400, BAD, "top_p", {}),
    ("top_k -1", MESSAGES, {"top_k": -1}, 400, BAD, "top_k", {}),
    (
        "stop_sequences a string",
        MESSAGES,
        {"stop_sequences": "END"},
        400,
        BAD,
        "stop_sequences",
        {},
    ),
    (
        "stop_sequences empty string",
        MESSAGES,
        {"stop_sequences": [""]},
        400,
        BAD,
        "stop_sequences",
        {},
    ),
    (
        "too many stop_sequences",
        MESSAGES,
        {"stop_sequences": [f"s{i}" for i in range(17)]},
        400,
        BAD,
        "stop_sequences",
        {},
    ),
    ("system a number", MESSAGES, {"system": 5}, 400, BAD, "system", {}),
    ("system an image", MESSAGES, {"system": [IMAGE]}, 400, BAD, "system", {}),
    ("metadata a string", MESSAGES, {"metadata": "me"}, 400, BAD, "metadata", {}),
    ("stream a list", MESSAGES, {"stream": [1]}, 400, BAD, "stream", {}),
    (
        "unknown model",
        MESSAGES,
        {"model": "claude-sonnet-4-5"},
        404,
        "not_found_error",
        "claude-sonnet-4-5",
        {},
    ),
    ("path as model", MESSAGES, {"model": "../../etc/passwd"}, 404, "not_found_error", "model", {}),
    ("body not JSON", MESSAGES, "{nope", 400, BAD, "JSON", {}),
    ("body not an object", MESSAGES, "[1, 2]", 400, BAD, "object", {}),
    ("method GET", MESSAGES, {}, 405, BAD, "GET", {"method": "get"}),
    ("wrong key", MESSAGES, {}, 401, "authentication_error", "Incorrect API key", {"key": "sk-no"}),
    ("no key", MESSAGES, {}, 401, "authentication_error", "x-api-key", {"key": None}),
    (
        "oversized body",
        MESSAGES,
        {"messages": [{"role": "user", "content": "x" * 2000}]},
        413,
        "request_too_large",
        "too large",
        {"settings": {"DATA_UPLOAD_MAX_MEMORY_SIZE": 1000}},
    ),
    # count_tokens: the same body checks, without max_tokens.
    ("count: missing messages", COUNT, {"messages": DROP}, 400, BAD, "messages", {}),
    ("count: image block", COUNT, user(IMAGE), 400, BAD, "not supported", {}),
    (
        "count: forced server tool",
        COUNT,
        {
            "tools": [{"type": "bash_20250124", "name": "bash"}],
            "tool_choice": {"type": "tool", "name": "bash"},
        },
        400,
        BAD,
        "server tool 'bash'",
        {},
    ),
    (
        "count: thinking budget",
        COUNT,
        {"thinking": {"type": "enabled", "budget_tokens": 1}},
        400,
        BAD,
        "1024",
        {},
    ),
    ("count: unknown model", COUNT, {"model": "nope"}, 404, "not_found_error", "nope", {}),
    ("count: body not JSON", COUNT, "{", 400, BAD, "JSON", {}),
    ("count: method GET", COUNT, {}, 405, BAD, "GET", {"method": "get"}),
    ("count: wrong key", COUNT, {}, 401, "authentication_error", "Incorrect", {"key": "sk-no"}),
]


@pytest.fixture
def secret(db) -> str:
    """A key exists, so keys are required: rows send this one unless they test the key."""
    key = ApiKey(name="errors")
    value = key.new_secret()
    key.save()
    return value


def body_of(endpoint: str, overrides: dict | str) -> str:
    if isinstance(overrides, str):
        return overrides
    valid = {"model": "tiny", "messages": HI}
    if endpoint == MESSAGES:
        valid["max_tokens"] = 1
    merged = {**valid, **overrides}
    return json.dumps({k: v for k, v in merged.items() if v is not DROP})


def send(client, endpoint: str, body: str, how: dict, secret: str):
    key = how.get("key", secret)
    headers = {"HTTP_X_API_KEY": key} if key else {}
    if how.get("method") == "get":
        return client.get(endpoint, **headers)
    return client.post(endpoint, body, content_type="application/json", **headers)


@pytest.mark.parametrize(
    ("endpoint", "body", "status", "kind", "words", "how"),
    [row[1:] for row in ROWS],
    ids=[row[0] for row in ROWS],
)
def test_malformed_requests_get_anthropic_errors(
    client, tiny_entry, settings, secret, endpoint, body, status, kind, words, how
):
    changed = how.get("settings", {})
    before = {name: getattr(settings, name) for name in changed}
    for name, value in changed.items():
        setattr(settings, name, value)
    response = send(client, endpoint, body_of(endpoint, body), how, secret)
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    error = response.json()
    assert set(error) == {"type", "error"}
    assert error["type"] == "error"
    assert set(error["error"]) == {"type", "message"}
    assert error["error"]["type"] == kind
    assert error["error"]["message"].strip()
    assert words in error["error"]["message"]
    # And the server is unharmed: a valid request succeeds at once.
    for name, value in before.items():
        setattr(settings, name, value)
    valid = send(client, MESSAGES, body_of(MESSAGES, {}), {}, secret)
    assert valid.status_code == 200, valid.content
    Message.model_validate(valid.json())


def test_the_table_is_long_enough():
    assert len([row for row in ROWS if row[1] == MESSAGES]) >= 25
    assert len([row for row in ROWS if row[1] == COUNT]) >= 5


def test_method_not_allowed_says_which(client, db):
    response = client.get(MESSAGES)
    assert response.status_code == 405
    assert response["Allow"] == "POST"
