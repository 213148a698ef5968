"""POST /v1/messages and /v1/messages/count_tokens in-process: Anthropic's shapes, checked
with the anthropic SDK's own models, on the tiny model and on the scripted reasoning model."""

from __future__ import annotations

import json

import pytest
from anthropic.types import Message, MessageTokensCount, RawMessageStreamEvent
from asgiref.sync import async_to_sync
from django.test import AsyncClient
from pydantic import TypeAdapter

from apikeys.models import ApiKey
from inference.edge.dialects import ANTHROPIC, error_response
from inference.protocol.anthropic.requests import MessagesRequest
from inference.protocol.errors import APIError
from inference.serving.anthropic.plan import template_messages
from inference.serving.tooluse import arguments_object
from tests.support.helpers import break_engine_after
from tests.support.scripted import ARGUMENTS, REASONING

MESSAGES = "/v1/messages"
COUNT = "/v1/messages/count_tokens"
HI = [{"role": "user", "content": "Hi"}]
STREAM_EVENT = TypeAdapter(RawMessageStreamEvent)
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 6}, "days": {"type": "integer"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def create(client, **body) -> dict:
    payload = {"model": "tiny", "max_tokens": 4, "messages": HI, "temperature": 0, **body}
    response = client.post(MESSAGES, payload, content_type="application/json")
    assert response.status_code == 200, response.content
    Message.model_validate(response.json())  # the official SDK's own model of the response
    return response.json()


def count(client, **body) -> int:
    payload = {"model": "tiny", "messages": HI, **body}
    response = client.post(COUNT, payload, content_type="application/json")
    assert response.status_code == 200, response.content
    return MessageTokensCount.model_validate(response.json()).input_tokens


def stream(body: dict) -> list[tuple[str, dict]]:
    """POSTs a streamed message; returns its (event name, data) pairs, pings included."""

    async def go() -> tuple[int, str, str]:
        payload = {"model": "tiny", "max_tokens": 4, "messages": HI, "temperature": 0, **body}
        response = await AsyncClient().post(
            MESSAGES, {**payload, "stream": True}, content_type="application/json"
        )
        chunks = [chunk async for chunk in response.streaming_content]
        return response.status_code, response["Content-Type"], b"".join(chunks).decode()

    status, content_type, text = async_to_sync(go)()
    assert status == 200
    assert content_type == "text/event-stream"
    events = []
    for block in text.split("\n\n"):
        if not block or block.startswith(":"):
            continue
        name, data = block.split("\n")
        events.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return events


def checked(events: list[tuple[str, dict]]) -> list[dict]:
    """Every event validates as the SDK's; the event name matches the data's type."""
    out = []
    for name, data in events:
        assert name == data["type"]
        if name != "ping":
            STREAM_EVENT.validate_python(data)
            out.append(data)
    return out


def deltas(events: list[dict], kind: str, key: str) -> list[str]:
    return [
        e["delta"][key]
        for e in events
        if e["type"] == "content_block_delta" and e["delta"]["type"] == kind
    ]


def test_message_shape(client, tiny_entry):
    body = create(client)
    assert body["id"].startswith("msg_")
    assert (body["type"], body["role"], body["model"]) == ("message", "assistant", "tiny")
    (block,) = body["content"]
    assert block["type"] == "text" and block["text"]
    assert body["stop_reason"] == "max_tokens"
    assert body["stop_sequence"] is None
    usage = body["usage"]
    assert usage["output_tokens"] == 4
    assert usage["cache_creation_input_tokens"] == 0
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] == count(client)


def test_count_tokens_counts_what_create_reads(client, tiny_entry):
    system = "You are terse."
    tools = [WEATHER]
    counted = count(client, system=system, tools=tools)
    usage = create(client, system=system, tools=tools)["usage"]
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] == counted
    # System and tools are part of the count; output fields are accepted and ignored.
    assert counted > count(client, system=system) < count(client, system=system + " Really.")
    assert count(client, max_tokens=5, stream=True) == count(client)
    # With tool_choice none the tools are not offered, so not counted.
    assert count(client, tools=tools, tool_choice={"type": "none"}) == count(client)


def test_a_repeated_prompt_reads_the_prefix_cache(client, tiny_entry):
    messages = [{"role": "user", "content": "Tell me about caches " * 20}]
    first = create(client, messages=messages)["usage"]
    second = create(client, messages=messages)["usage"]
    whole = count(client, messages=messages)
    assert first["input_tokens"] + first["cache_read_input_tokens"] == whole
    assert second["input_tokens"] + second["cache_read_input_tokens"] == whole
    assert second["cache_read_input_tokens"] > 0


def test_stream_events(client, tiny_entry):
    events = stream({"max_tokens": 5})
    assert [name for name, _ in events[:2]] == ["message_start", "ping"]
    parsed = checked(events)
    kinds = [e["type"] for e in parsed]
    assert kinds[0] == "message_start"
    assert kinds[1] == "content_block_start"
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    start = parsed[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] + start["usage"]["cache_read_input_tokens"] == count(
        client
    )
    assert parsed[1]["content_block"] == {"type": "text", "text": ""}
    assert parsed[-2]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert parsed[-2]["usage"]["output_tokens"] == 5
    text = "".join(deltas(parsed, "text_delta", "text"))
    assert text == create(client, max_tokens=5)["content"][0]["text"]


def test_stop_sequences(client, tiny_entry):
    text = create(client, max_tokens=8)["content"][0]["text"]
    # The latest two characters that first occur there: the text before them is not empty.
    at = max(i for i in range(1, len(text) - 1) if text.find(text[i : i + 2]) == i)
    stop = text[at : at + 2]
    body = create(client, max_tokens=8, stop_sequences=["never-said", stop])
    assert body["stop_reason"] == "stop_sequence"
    assert body["stop_sequence"] == stop
    before = text[:at]
    assert [b["text"] for b in body["content"]] == [before]
    streamed = checked(stream({"max_tokens": 8, "stop_sequences": [stop]}))
    assert streamed[-2]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": stop}
    assert "".join(deltas(streamed, "text_delta", "text")) == before


def test_prefill_is_continued_not_repeated(client, tiny_entry):
    prefill = [*HI, {"role": "assistant", "content": "Sure, here"}]
    assert count(client, messages=prefill) > count(client)
    plain = create(client, max_tokens=6)["content"][0]["text"]
    continued = create(client, max_tokens=6, messages=prefill)["content"][0]["text"]
    assert continued != plain
    assert not continued.startswith("Sure, here")


def test_consecutive_turns_of_one_role_are_merged(client, tiny_entry):
    split = [{"role": "user", "content": "Hello"}, {"role": "user", "content": "there"}]
    merged = [{"role": "user", "content": [{"type": "text", "text": "Hello\n\nthere"}]}]
    assert count(client, messages=split) == count(client, messages=merged)


def test_template_messages_of_a_tool_round_trip(client, tiny_entry):
    request = MessagesRequest.model_validate(
        {
            "model": "tiny",
            "max_tokens": 5,
            "system": [{"type": "text", "text": "Be brief."}],
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "hm", "signature": "x"},
                        {"type": "text", "text": "Let me look."},
                        {"type": "tool_use", "id": "toolu_1", "name": "w", "input": {"c": "P"}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                        {"type": "text", "text": "Thanks"},
                    ],
                },
            ],
        }
    )
    messages, prefill = template_messages(request)
    assert prefill == ""
    assert messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "w", "arguments": '{"c": "P"}'},
                }
            ],
            "reasoning_content": "hm",
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
        {"role": "user", "content": "Thanks"},
    ]
    body = create(client, tools=[WEATHER], **request.model_dump(include={"system", "messages"}))
    assert body["stop_reason"] in {"max_tokens", "end_turn", "tool_use"}


def test_catalog_system_prompt_applies_when_the_request_has_none(client, tiny_entry):
    without = count(client)
    llamas = "You are a helpful assistant who likes llamas."
    tiny_entry.system_prompt = llamas
    tiny_entry.save()
    assert count(client) == count(client, system=llamas) != without
    assert count(client, system="Hi") != count(client)


def test_forced_tool_call(client, tiny_entry):
    choice = {"type": "tool", "name": "get_weather"}
    body = create(client, max_tokens=40, tools=[WEATHER], tool_choice=choice)
    (block,) = body["content"]
    assert block["type"] == "tool_use" and block["name"] == "get_weather"
    assert block["id"].startswith("toolu_")
    if body["stop_reason"] == "tool_use":  # the random model closed the JSON in time
        assert isinstance(block["input"]["city"], str)
    parsed = checked(stream({"max_tokens": 40, "tools": [WEATHER], "tool_choice": choice}))
    start = next(e for e in parsed if e["type"] == "content_block_start")
    assert start["content_block"]["type"] == "tool_use" and start["content_block"]["input"] == {}
    streamed = "".join(deltas(parsed, "input_json_delta", "partial_json"))
    if parsed[-2]["delta"]["stop_reason"] == "tool_use":
        assert json.loads(streamed) == block["input"]


def test_unknown_top_level_fields_are_tolerated(client, tiny_entry, caplog):
    body = create(client, service_tier="auto", context_management={"edits": []})
    assert body["type"] == "message"
    assert "service_tier" in caplog.text


def test_keys_by_x_api_key_or_bearer(client, tiny_entry, settings):
    settings.REQUIRE_API_KEY = True
    key = ApiKey(name="claude")
    secret = key.new_secret()
    key.save()
    payload = {"model": "tiny", "max_tokens": 1, "messages": HI}

    def post(**headers):
        return client.post(MESSAGES, payload, content_type="application/json", **headers)

    assert post(HTTP_X_API_KEY=secret, HTTP_ANTHROPIC_VERSION="2023-06-01").status_code == 200
    assert post(HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 200
    for headers in ({}, {"HTTP_X_API_KEY": "sk-nope"}, {"HTTP_AUTHORIZATION": "Bearer sk-nope"}):
        response = post(**headers)
        assert response.status_code == 401
        assert response.json()["type"] == "error"
        assert response.json()["error"]["type"] == "authentication_error"
    assert "x-api-key" in post().json()["error"]["message"]


def test_an_engine_failure_mid_stream_ends_with_an_error_event(client, tiny_entry, monkeypatch):
    break_engine_after(monkeypatch, 3)
    events = stream({"max_tokens": 20})
    name, error = events[-1]
    assert name == "error"
    assert error == {
        "type": "error",
        "error": {"type": "api_error", "message": error["error"]["message"]},
    }
    assert "device lost" not in error["error"]["message"]
    assert "".join(deltas(checked(events[:-1]), "text_delta", "text"))  # some text came first
    monkeypatch.undo()
    assert create(client)["stop_reason"] == "max_tokens"  # the engine keeps serving


def test_request_timeout_is_a_504_timeout_error(client, tiny_entry, settings):
    settings.REQUEST_TIMEOUT = 0.2
    payload = {"model": "tiny", "max_tokens": 5000, "messages": HI}
    response = client.post(MESSAGES, payload, content_type="application/json")
    assert response.status_code == 504
    assert response.json()["error"]["type"] == "timeout_error"


def test_a_broken_stream_ends_with_an_error_event():
    (line,) = ANTHROPIC.stream_end(APIError("boom", status=500, type="server_error"), 0)
    name, data = line.removesuffix("\n\n").split("\n")
    assert name == "event: error"
    assert json.loads(data.removeprefix("data: ")) == {
        "type": "error",
        "error": {"type": "api_error", "message": "boom"},
    }


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (503, "overloaded_error"),
        (504, "timeout_error"),
    ],
)
def test_error_types_follow_the_status(status, kind):
    response = error_response(ANTHROPIC, APIError("x", status=status, headers={"Retry-After": "1"}))
    assert response.status_code == status
    assert json.loads(response.content) == {
        "type": "error",
        "error": {"type": kind, "message": "x"},
    }
    assert response["Retry-After"] == "1"


# The scripted reasoning model: thinking, then a Hermes tool call with streamed arguments.
THINKER = {
    "model": "thinker",
    "max_tokens": 2000,
    "messages": [{"role": "user", "content": "Weather?"}],
}


def test_thinking_and_a_tool_call(client, scripted_entry):
    body = create(client, **THINKER, tools=[WEATHER])
    thinking, call = body["content"]
    assert thinking == {"type": "thinking", "thinking": REASONING, "signature": ""}
    assert call["type"] == "tool_use" and call["name"] == "get_weather"
    assert call["input"] == json.loads(ARGUMENTS)
    assert body["stop_reason"] == "tool_use"


def test_streamed_thinking_and_tool_input(client, scripted_entry):
    parsed = checked(stream({**THINKER, "tools": [WEATHER]}))
    starts = [e["content_block"] for e in parsed if e["type"] == "content_block_start"]
    assert [b["type"] for b in starts] == ["thinking", "tool_use"]
    assert starts[1]["input"] == {} and starts[1]["id"].startswith("toolu_")
    thinking = deltas(parsed, "thinking_delta", "thinking")
    assert len(thinking) > 1 and "".join(thinking) == REASONING
    assert deltas(parsed, "signature_delta", "signature") == [""]
    pieces = deltas(parsed, "input_json_delta", "partial_json")
    assert len(pieces) >= 4  # as the model wrote them
    assert "".join(pieces) == ARGUMENTS
    stops = [e["index"] for e in parsed if e["type"] == "content_block_stop"]
    assert stops == [0, 1]
    assert parsed[-2]["delta"]["stop_reason"] == "tool_use"


def test_thinking_disabled(client, scripted_entry):
    body = create(client, **THINKER, thinking={"type": "disabled"})
    assert body["content"] == [{"type": "text", "text": "It is sunny in Paris."}]
    assert body["stop_reason"] == "end_turn"
    enabled = create(client, **THINKER, thinking={"type": "enabled", "budget_tokens": 1024})
    assert enabled["content"][0]["thinking"] == REASONING


def test_what_claude_code_sends_is_answered(client, tiny_entry):
    """The shapes tests/fixtures/agents/claude_code.json holds: `?beta=true`, a billing header
    block, cache_control, a system message between turns, adaptive thinking with `display`, a
    deferred tool, an offered server tool, an image in a tool result, a JSON-string user_id."""
    body = {
        "model": "tiny",
        "max_tokens": 32000,
        "temperature": 0,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.328.850;"},
            {"type": "text", "text": "You are an agent.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Read hello.png"}]},
            {"role": "system", "content": "<system-reminder>Be brief.</system-reminder>"},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "Read",
                        "input": {"file_path": "/p/hello.png"},
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [IMAGE],
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            },
        ],
        "tools": [
            {
                "name": "Read",
                "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}},
            },
            {
                "name": "Deferred",
                "input_schema": {"type": "object", "properties": {}},
                "defer_loading": True,
            },
            {"type": "web_search_20250305", "name": "web_search"},
        ],
        "thinking": {"type": "adaptive", "display": "omitted"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
        "metadata": {"user_id": '{"device_id": "d", "session_id": "s"}'},
    }
    response = client.post(f"{MESSAGES}?beta=true", body, content_type="application/json")
    assert response.status_code == 200, response.content
    assert Message.model_validate(response.json()).stop_reason in ("end_turn", "max_tokens")
    request = MessagesRequest.model_validate(body)
    messages, _ = template_messages(request)
    assert [m["role"] for m in messages] == ["system", "user", "system", "assistant", "tool"]
    assert messages[4]["content"] == "[image omitted: this server shows the model text only]"
    assert [tool.name for tool in request.tools] == ["Read", "Deferred"]


def test_a_cut_off_tool_use_keeps_its_partial_input(client, tiny_entry):
    """max_tokens in the middle of a forced call: stop_reason max_tokens, and the block's input
    is what its streamed partial_json holds so far, never a made-up {} that looks finished."""
    choice = {"type": "tool", "name": "get_weather"}
    body = create(client, max_tokens=6, tools=[WEATHER], tool_choice=choice)
    assert body["stop_reason"] == "max_tokens"
    (block,) = body["content"]
    parsed = checked(stream({"max_tokens": 6, "tools": [WEATHER], "tool_choice": choice}))
    assert parsed[-2]["delta"]["stop_reason"] == "max_tokens"
    streamed = "".join(deltas(parsed, "input_json_delta", "partial_json"))
    with pytest.raises(ValueError):
        json.loads(streamed)  # really cut off
    assert block["input"] == arguments_object(streamed)
    if '"city": "' in streamed:
        assert "city" in block["input"]
