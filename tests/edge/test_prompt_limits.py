"""What a request's prompts may hold, checked before any work (serving/prepare.py): characters
before anything is rendered, then tokens with every copy counted; a request's n copies are
prepared once, off the engine thread, each with its own copy of the compiled grammar."""

import json

import pytest
from django.test import Client

from inference.serving import prepare
from tests.support.helpers import CHAT, SHORT_CHAT, assert_error


def post(client: Client, body: dict, url: str = CHAT):
    return client.post(url, body, content_type="application/json")


@pytest.fixture
def preparations(monkeypatch) -> list[str]:
    """The thread each distinct prompt was prepared on."""
    import threading

    seen: list[str] = []
    real = prepare._ready

    def ready(request):
        seen.append(threading.current_thread().name)
        return real(request)

    monkeypatch.setattr(prepare, "_ready", ready)
    return seen


def test_a_prompt_over_the_character_limit_is_refused_before_it_is_rendered(
    client, tiny_entry, settings, preparations
):
    settings.MAX_REQUEST_PROMPT_CHARS = 5000
    big = {**SHORT_CHAT, "n": 8, "messages": [{"role": "user", "content": "x " * 3000}]}
    error = assert_error(post(client, big), 400, "messages", "too_many_prompt_characters")
    assert "MAX_REQUEST_PROMPT_CHARS" in error["message"]
    legacy = {"model": "tiny", "prompt": "y" * 6000, "max_tokens": 2}
    assert_error(
        post(client, legacy, "/v1/completions"), 400, "prompt", "too_many_prompt_characters"
    )
    assert preparations == []  # nothing was rendered or tokenized
    assert post(client, SHORT_CHAT).status_code == 200


def test_count_tokens_goes_through_the_same_limits(client, tiny_entry, settings):
    body = {"model": "tiny", "messages": [{"role": "user", "content": "word " * 400}]}
    counted = post(client, body, "/v1/messages/count_tokens")
    assert counted.status_code == 200 and counted.json()["input_tokens"] > 400
    settings.MAX_REQUEST_PROMPT_CHARS = 1000
    refused = post(client, body, "/v1/messages/count_tokens")
    assert refused.status_code == 400
    assert refused.json()["error"]["type"] == "invalid_request_error"
    assert "MAX_REQUEST_PROMPT_CHARS" in refused.json()["error"]["message"]
    settings.MAX_REQUEST_PROMPT_CHARS = 0
    settings.MAX_REQUEST_PROMPT_TOKENS = 100
    refused = post(client, body, "/v1/messages/count_tokens")
    assert refused.status_code == 400 and "MAX_REQUEST_PROMPT_TOKENS" in refused.text


def test_every_copy_counts_towards_the_token_limit(client, tiny_entry, settings):
    prompt_tokens = post(client, SHORT_CHAT).json()["usage"]["prompt_tokens"]
    settings.MAX_REQUEST_PROMPT_TOKENS = prompt_tokens * 3
    assert post(client, {**SHORT_CHAT, "n": 3}).status_code == 200
    error = assert_error(
        post(client, {**SHORT_CHAT, "n": 4}), 400, "prompt", "too_many_prompt_tokens"
    )
    assert str(prompt_tokens * 4) in error["message"]


def test_copies_are_prepared_once_off_the_engine_thread_each_with_its_grammar(
    client, tiny_entry, preparations
):
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
    }
    body = {
        **SHORT_CHAT,
        "n": 4,
        "max_tokens": 40,
        "temperature": 1.0,
        "seed": 7,
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}},
    }
    answer = post(client, body).json()
    assert len(preparations) == 1 and preparations[0].startswith("prompt")
    assert len(answer["choices"]) == 4
    for choice in answer["choices"]:  # each copy walked the grammar alone
        if choice["finish_reason"] == "stop":
            assert isinstance(json.loads(choice["message"]["content"])["n"], int)


def test_deeply_nested_json_inside_a_string_is_text_not_a_500(client, tiny_entry):
    """The body's own depth is capped at the door (edge/body.py); arguments that a client
    sends as a JSON string are parsed later, and nested past Python's recursion limit they
    stay text."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "[" * 100_000}}
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    answer = post(client, {**SHORT_CHAT, "messages": messages, "tools": tools})
    # Rendered as text: 50k tokens, past the tiny model's context, refused as such.
    assert answer.status_code == 400, answer.content
    assert answer.json()["error"]["code"] == "context_length_exceeded"
