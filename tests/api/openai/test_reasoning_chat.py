"""Chat completions with a reasoning model (tests/support/scripted.py): thinking split out of the
content, tool-call arguments streamed as written, thinking switched off, keep-alive comments."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tests.support.helpers import CHAT, stream
from tests.support.scripted import ARGUMENTS, REASONING, WEATHER_TOOL

ASK = [{"role": "user", "content": "Weather in Paris?"}]


def chat(client, **body) -> dict:
    payload = {"model": "thinker", "messages": ASK, "temperature": 0, **body}
    response = client.post(CHAT, payload, content_type="application/json")
    assert response.status_code == 200, response.content
    ChatCompletion.model_validate(response.json())
    return response.json()


def chunks(**body) -> list[dict]:
    status, _, events = stream({"model": "thinker", "messages": ASK, "stream": True, **body})
    assert status == 200
    assert events[-1] == "[DONE]"
    parsed = [json.loads(e) for e in events[:-1]]
    for chunk in parsed:
        ChatCompletionChunk.model_validate(chunk)
    return parsed


def deltas(parsed: list[dict], key: str) -> list:
    return [c["choices"][0]["delta"][key] for c in parsed if key in c["choices"][0]["delta"]]


def test_thinking_and_a_tool_call(client, scripted_entry):
    body = chat(client, tools=[WEATHER_TOOL])
    (choice,) = body["choices"]
    message = choice["message"]
    assert message["reasoning_content"] == message["reasoning"] == REASONING
    assert message["content"] is None
    (call,) = message["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": ARGUMENTS}
    assert choice["finish_reason"] == "tool_calls"


def test_streamed_thinking_and_arguments_as_they_are_written(client, scripted_entry):
    parsed = chunks(tools=[WEATHER_TOOL])
    reasoning = deltas(parsed, "reasoning_content")
    assert len(reasoning) > 1
    assert "".join(reasoning) == "".join(deltas(parsed, "reasoning")) == REASONING
    assert "".join(d for d in deltas(parsed, "content") if d) == ""
    calls = [c for calls in deltas(parsed, "tool_calls") for c in calls]
    first, *rest = calls
    assert first["id"].startswith("call_")
    assert first["function"]["name"] == "get_weather"
    assert all("name" not in c.get("function", {}) and "id" not in c for c in rest)
    pieces = [c["function"]["arguments"] for c in calls]
    assert len([p for p in pieces if p]) >= 4  # one piece per token the model wrote
    assert "".join(pieces) == ARGUMENTS
    assert parsed[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_without_tools_the_call_stays_text_and_thinking_is_still_split(client, scripted_entry):
    message = chat(client)["choices"][0]["message"]
    assert message["reasoning_content"] == REASONING
    assert message["content"].startswith("<tool_call>")
    assert "tool_calls" not in message


@pytest.mark.parametrize(
    "switch",
    [
        {"chat_template_kwargs": {"enable_thinking": False}},
        {"reasoning_effort": "none"},
    ],
)
def test_thinking_switched_off(client, scripted_entry, switch):
    message = chat(client, **switch)["choices"][0]["message"]
    assert message["content"] == "It is sunny in Paris."
    assert "reasoning_content" not in message


def test_cut_off_inside_the_thinking(client, scripted_entry):
    body = chat(client, max_tokens=3)
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["reasoning_content"] == "The user wants the weather"
    assert choice["message"]["content"] == ""
    parsed = chunks(max_tokens=3)
    assert "".join(deltas(parsed, "reasoning")) == "The user wants the weather"
    assert parsed[-1]["choices"][0]["finish_reason"] == "length"


def test_a_json_schema_reply_does_not_think(client, scripted_entry):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    body = chat(
        client,
        max_tokens=20,
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
    )
    message = body["choices"][0]["message"]
    assert "reasoning_content" not in message
    if body["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(message["content"])["a"], int)


def test_template_kwargs_cannot_replace_the_servers_own(client, scripted_entry):
    message = chat(client, chat_template_kwargs={"add_generation_prompt": False, "tokenize": 0})[
        "choices"
    ][0]["message"]
    assert message["reasoning_content"] == REASONING


def test_quiet_streams_send_keep_alive_comments(scripted_entry, settings):
    settings.SSE_KEEPALIVE_SECONDS = 0.0001

    async def go() -> str:
        body = {"model": "thinker", "messages": ASK, "stream": True, "tools": [WEATHER_TOOL]}
        response = await AsyncClient().post(CHAT, body, content_type="application/json")
        return b"".join([c async for c in response.streaming_content]).decode()

    text = async_to_sync(go)()
    blocks = [b for b in text.split("\n\n") if b]
    assert ": keep-alive" in blocks
    data = [json.loads(b.removeprefix("data: ")) for b in blocks if b.startswith("data: {")]
    calls = [c for d in data for c in d["choices"][0]["delta"].get("tool_calls", [])]
    assert "".join(c["function"]["arguments"] for c in calls) == ARGUMENTS


def test_a_template_that_refuses_the_request_is_a_400(client, scripted_entry):
    # A template that raises (roles out of order, a kwarg it cannot use) is the request's fault.
    response = client.post(
        CHAT,
        {"model": "thinker", "messages": ASK, "chat_template_kwargs": {"messages": 1}},
        content_type="application/json",
    )
    assert response.status_code == 200  # reserved names are dropped, not passed on
    family = scripted_entry.family
    family.chat_template = "{{ raise_exception('roles must alternate') }}"
    family.save()
    response = client.post(
        CHAT, {"model": "thinker", "messages": ASK}, content_type="application/json"
    )
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert "roles must alternate" in error["message"]
    assert error["param"] == "messages"
