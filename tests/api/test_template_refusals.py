"""What a chat template raises about the client's messages is the client's error: a 400 in the
endpoint's own dialect, never a 500. An empty conversation (a lone empty developer message,
which transformers refuses before the template runs), a template's own raise_exception (roles
that do not alternate), a template that fails on content it cannot handle; through chat
completions, Anthropic Messages, Responses and Ollama's chat, streamed or not."""

from __future__ import annotations

import json

import pytest

# The refusal comes before anything is stored: PostgreSQL would only repeat it.
pytestmark = pytest.mark.database_independent

# A template that indexes its messages without checking them, as many do: a TypeError inside
# jinja when a message's content is not a string, an IndexError-like failure when none is left.
ALTERNATION = (
    "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant') }}{% endif %}"
    "{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:"
)
UNTYPED = "{% for m in messages %}{{ m.content + 1 }}{% endfor %}"

ROUTES = {
    "chat": "/v1/chat/completions",
    "messages": "/v1/messages",
    "responses": "/v1/responses",
    "ollama": "/api/chat",
}


def _body(dialect: str, model: str, messages: list[dict], stream: bool) -> dict:
    if dialect == "responses":
        return {"model": model, "input": messages, "stream": stream}
    body = {"model": model, "messages": messages, "stream": stream}
    if dialect == "messages":
        body["max_tokens"] = 8
    return body


def _message_of(dialect: str, response) -> str:
    """The error's message as the dialect writes it (and that it is that dialect's shape)."""
    body = response.json()
    if dialect == "messages":
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        return body["error"]["message"]
    if dialect == "ollama":
        return body["error"]
    assert body["error"]["type"] == "invalid_request_error", body
    return body["error"]["message"]


def _use_template(entry, template: str) -> None:
    """The entry's family (the seeded Qwen3 row, in this test's transaction) renders with
    `template`."""
    entry.family.chat_template = template
    entry.family.save()


def _post(client, dialect: str, body: dict):
    response = client.post(ROUTES[dialect], json.dumps(body), content_type="application/json")
    if response.streaming:  # a refusal must come before the stream starts
        content = b"".join(response.streaming_content).decode()
        raise AssertionError(f"{dialect} started a stream: {content[:300]}")
    return response


# What is left of a conversation once its empty instructions are dropped: nothing.
EMPTY = {
    "chat": [{"role": "developer", "content": ""}],
    "responses": [{"role": "developer", "content": ""}],
    "ollama": [{"role": "system", "content": ""}],
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("dialect", list(EMPTY))
def test_an_empty_conversation_is_a_400(client, tiny_entry, dialect, stream):
    response = _post(client, dialect, _body(dialect, "tiny", EMPTY[dialect], stream))
    assert response.status_code == 400, response.content
    assert "empty conversation" in _message_of(dialect, response)


def test_messages_without_a_turn_is_a_400(client, tiny_entry):
    # Anthropic's Messages refuses an empty list itself, before any template.
    body = {**_body("messages", "tiny", [], False), "system": ""}
    response = _post(client, "messages", body)
    assert response.status_code == 400, response.content
    assert "messages" in _message_of("messages", response)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("dialect", list(ROUTES))
def test_a_template_that_refuses_the_roles_is_a_400(client, scripted_entry, dialect, stream):
    _use_template(scripted_entry, ALTERNATION)
    # Two user turns in a row: the template raises. (Messages merges consecutive user turns
    # itself, so there the assistant speaks first.)
    turns = ["user", "user"] if dialect != "messages" else ["assistant", "user"]
    messages = [{"role": role, "content": f"turn {i}"} for i, role in enumerate(turns)]
    response = _post(client, dialect, _body(dialect, "thinker", messages, stream))
    assert response.status_code == 400, response.content
    assert "roles must alternate" in _message_of(dialect, response)


@pytest.mark.parametrize("dialect", list(ROUTES))
def test_a_template_that_fails_on_the_content_is_a_400(client, scripted_entry, dialect):
    _use_template(scripted_entry, UNTYPED)
    body = _body(dialect, "thinker", [{"role": "user", "content": "Hello"}], False)
    response = _post(client, dialect, body)
    assert response.status_code == 400, response.content
    assert "could not render" in _message_of(dialect, response)
