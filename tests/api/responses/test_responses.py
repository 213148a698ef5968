"""POST /v1/responses in-process with the tiny model: the response object, its parameters,
structured output, forced function calls, and the typed event stream."""

from __future__ import annotations

import json
import logging

import pytest

from inference.serving.reply import ReplyParser
from storedresponses.models import StoredResponse
from tests.support.helpers import assert_error, break_engine_after
from tests.support.responses_support import (
    RESPONSES,
    check_stream_events,
    create,
    stream,
    valid_response,
)
from tests.support.scripted import ARGUMENTS, REASONING, WEATHER_TOOL

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
FORCED = {"tools": [WEATHER], "tool_choice": {"type": "function", "name": "get_weather"}}
FLAG_SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
    "additionalProperties": False,
}


def test_response_object_shape(client, tiny_entry):
    response = create(client, max_output_tokens=3)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    body = response.json()
    sdk = valid_response(body)
    assert body["id"].startswith("resp_")
    assert body["object"] == "response"
    assert body["model"] == "tiny"
    assert body["status"] in ("completed", "incomplete")
    (message,) = body["output"]
    assert message["type"] == "message"
    assert message["id"].startswith("msg_")
    assert message["role"] == "assistant"
    (part,) = message["content"]
    assert part["type"] == "output_text"
    assert part["annotations"] == []
    assert body["output_text"] == part["text"] == sdk.output_text
    usage = body["usage"]
    assert usage["output_tokens"] <= 3
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert usage["input_tokens_details"]["cached_tokens"] >= 0
    assert usage["output_tokens_details"]["reasoning_tokens"] == 0


def test_cut_off_at_max_output_tokens_is_incomplete(client, tiny_entry):
    body = create(client, max_output_tokens=2).json()
    valid_response(body)
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["output"][0]["status"] == "incomplete"
    assert body["usage"]["output_tokens"] == 2
    assert body["completed_at"] is None


@pytest.mark.parametrize(
    "item_input",
    [
        [{"role": "user", "content": "Hi"}],
        [{"type": "message", "role": "user", "content": "Hi"}],
        [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
    ],
    ids=["easy message", "typed message", "input_text parts"],
)
def test_a_string_input_is_one_user_message(client, tiny_entry, item_input):
    plain = create(client, input="Hi").json()
    items = create(client, input=item_input).json()
    assert items["usage"]["input_tokens"] == plain["usage"]["input_tokens"]
    assert items["output_text"] == plain["output_text"]


def test_instructions_are_a_system_message(client, tiny_entry):
    plain = create(client).json()
    with_instructions = create(client, instructions="Answer in French.").json()
    assert with_instructions["instructions"] == "Answer in French."
    # SmolLM2's template adds its own system prompt when none is given: the count changes.
    assert with_instructions["usage"]["input_tokens"] != plain["usage"]["input_tokens"]
    system = create(
        client,
        input=[
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "Hi"},
        ],
    ).json()
    assert system["usage"]["input_tokens"] == with_instructions["usage"]["input_tokens"]
    developer = create(
        client,
        input=[
            {"role": "developer", "content": "Answer in French."},
            {"role": "user", "content": "Hi"},
        ],
    ).json()
    assert developer["usage"]["input_tokens"] == system["usage"]["input_tokens"]


def test_assistant_turns_with_output_text_parts(client, tiny_entry):
    body = create(
        client,
        input=[
            {"role": "user", "content": "Hi"},
            {
                "type": "message",
                "role": "assistant",
                "id": "msg_earlier",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Hello!", "annotations": []}],
            },
            {"role": "user", "content": [{"type": "input_text", "text": "Again"}]},
        ],
    ).json()
    valid_response(body)
    assert body["usage"]["input_tokens"] > create(client).json()["usage"]["input_tokens"]


def test_parameters_are_echoed(client, tiny_entry):
    body = create(
        client,
        temperature=0.5,
        top_p=0.9,
        max_output_tokens=2,
        metadata={"ticket": "T-1", "team": "ml"},
        user="someone",
        tools=[WEATHER],
        tool_choice="none",
        parallel_tool_calls=False,
        reasoning={"effort": "low"},
        store=False,
    ).json()
    sdk = valid_response(body)
    assert (body["temperature"], body["top_p"], body["max_output_tokens"]) == (0.5, 0.9, 2)
    assert body["metadata"] == {"ticket": "T-1", "team": "ml"}
    assert body["user"] == "someone"
    assert body["tool_choice"] == "none"
    assert body["tools"][0]["name"] == "get_weather"
    assert body["tools"][0]["parameters"] == WEATHER["parameters"]
    assert body["parallel_tool_calls"] is False
    assert body["reasoning"]["effort"] == "low"
    assert body["text"] == {"format": {"type": "text"}}
    assert body["store"] is False
    assert sdk.tools[0].name == "get_weather"
    # tool_choice "none": the tools are not offered, the reply is a message.
    assert [item["type"] for item in body["output"]] == ["message"]


def test_catalog_default_temperature_is_echoed(client, tiny_entry):
    tiny_entry.default_temperature = 0.25
    tiny_entry.save()
    body = create(client, temperature=None).json()
    assert body["temperature"] == 0.25


def test_json_schema_text_format(client, tiny_entry):
    text = {
        "format": {"type": "json_schema", "name": "flag", "schema": FLAG_SCHEMA, "strict": True}
    }
    body = create(client, text=text, max_output_tokens=20).json()
    valid_response(body)
    assert body["status"] == "completed"
    assert body["text"]["format"]["schema"] == FLAG_SCHEMA
    value = json.loads(body["output_text"])
    assert set(value) == {"ok"} and isinstance(value["ok"], bool)


def test_json_object_text_format(client, tiny_entry):
    body = create(client, text={"format": {"type": "json_object"}}, max_output_tokens=40).json()
    valid_response(body)
    if body["status"] == "completed":
        assert isinstance(json.loads(body["output_text"]), dict)
    else:  # the tiny model may ramble past the limit, but still inside an object
        assert body["output_text"].startswith("{")


def test_forced_function_call(client, tiny_entry):
    body = create(client, **FORCED, max_output_tokens=20).json()
    valid_response(body)
    assert body["status"] == "completed"
    (call,) = body["output"]
    assert call["type"] == "function_call"
    assert call["id"].startswith("fc_")
    assert call["call_id"].startswith("call_")
    assert call["name"] == "get_weather"
    assert call["status"] == "completed"
    assert json.loads(call["arguments"])["city"] in ("Paris", "Rome")
    assert body["output_text"] == ""
    assert body["tool_choice"] == {"type": "function", "name": "get_weather"}


def test_required_tool_choice_makes_a_call(client, tiny_entry):
    body = create(client, tools=[WEATHER], tool_choice="required", max_output_tokens=30).json()
    valid_response(body)
    assert body["status"] == "completed"
    assert [item["type"] for item in body["output"]] == ["function_call"]
    assert json.loads(body["output"][0]["arguments"])["city"] in ("Paris", "Rome")


def test_function_call_output_in_the_same_input(client, tiny_entry):
    body = create(
        client,
        tools=[WEATHER],
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"city": "Paris"}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 21 C"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
        ],
    ).json()
    valid_response(body)
    assert body["output"][0]["type"] == "message"


def test_unknown_fields_are_tolerated_and_logged(client, tiny_entry, caplog):
    with caplog.at_level(logging.WARNING):
        response = create(
            client,
            truncation="auto",
            include=["reasoning.encrypted_content"],
            service_tier="auto",
            top_logprobs=2,
            prompt_cache_key="k",
            frobnicate=True,
        )
    assert response.status_code == 200
    assert "frobnicate" in caplog.text and "truncation" in caplog.text


def test_reasoning_effort_on_a_model_that_does_not_reason(client, tiny_entry):
    for effort in ("none", "low", "high"):
        body = create(client, reasoning={"effort": effort}).json()
        assert [item["type"] for item in body["output"]] == ["message"]


def test_what_codex_sends_is_accepted(client, tiny_entry):
    """Codex (wire_api = "responses") sends its whole history with store: false, reasoning
    items with encrypted content, function tools with strict: false, and a few extras."""
    shell = {
        "type": "function",
        "name": "shell",
        "description": "Runs a command",
        "strict": False,
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "array", "items": {"type": "string"}}},
            "required": ["command"],
            "additionalProperties": False,
        },
    }
    body = create(
        client,
        instructions="You are a coding agent.",
        input=[
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "Sandbox: none"}],
            },
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "List files"}],
            },
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "ls"}],
                "encrypted_content": "opaque",
            },
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "shell",
                "arguments": '{"command": ["ls"]}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "README.md"},
        ],
        tools=[shell],
        tool_choice="auto",
        parallel_tool_calls=False,
        reasoning={"effort": "medium", "summary": "none"},
        store=False,
        stream=False,
        include=["reasoning.encrypted_content"],
        prompt_cache_key="session-1",
        text={"verbosity": "medium"},
    )
    assert body.status_code == 200, body.content
    valid_response(body.json())
    assert body.json()["reasoning"] == {"effort": "medium", "summary": None}


def test_wrong_method_on_create(client, db):
    response = client.get(RESPONSES)
    assert response.status_code == 405
    assert response["Allow"] == "POST"
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}


# ------------------------------------------------------------------------------ streams


def test_stream_events_in_order(tiny_entry):
    status, content_type, events = stream({"max_output_tokens": 3, "temperature": 0})
    assert (status, content_type) == (200, "text/event-stream")
    check_stream_events(events)
    names = [name for name, _ in events]
    assert names[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    deltas = [data for name, data in events if name == "response.output_text.delta"]
    assert 1 <= len(deltas) <= 3
    assert names[4 : 4 + len(deltas)] == ["response.output_text.delta"] * len(deltas)
    assert names[4 + len(deltas) :] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete" if names[-1] == "response.incomplete" else "response.completed",
    ]
    created, final = events[0][1]["response"], events[-1][1]["response"]
    assert created["status"] == "in_progress" and created["output"] == []
    text = "".join(d["delta"] for d in deltas)
    assert final["output_text"] == text == events[-4][1]["text"]
    assert len({d["item_id"] for d in deltas} | {final["output"][0]["id"]}) == 1
    assert final["id"] == created["id"]
    valid_response(final)


def test_stream_and_whole_response_agree(client, tiny_entry):
    whole = create(client, max_output_tokens=5).json()
    _, _, events = stream({"max_output_tokens": 5, "temperature": 0})
    final = events[-1][1]["response"]
    assert final["output_text"] == whole["output_text"]
    assert final["usage"]["output_tokens"] == whole["usage"]["output_tokens"]
    assert final["status"] == whole["status"]


def test_stream_of_a_forced_call_streams_its_arguments(tiny_entry):
    _, _, events = stream({**FORCED, "max_output_tokens": 20, "temperature": 0})
    check_stream_events(events)
    names = [name for name, _ in events]
    assert names[0:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert events[2][1]["item"]["type"] == "function_call"
    assert events[2][1]["item"]["arguments"] == ""
    deltas = [data["delta"] for name, data in events if name.endswith("arguments.delta")]
    assert len(deltas) > 1  # the arguments arrive as the model writes them
    (done,) = [data for name, data in events if name.endswith("arguments.done")]
    final = events[-1][1]["response"]
    assert names[-1] == "response.completed"
    assert "".join(deltas) == done["arguments"] == final["output"][0]["arguments"]
    assert json.loads(done["arguments"])["city"] in ("Paris", "Rome")
    assert names[-2] == "response.output_item.done"
    assert events[-2][1]["item"]["status"] == "completed"


def test_stream_ends_without_done(tiny_entry):
    _, _, events = stream({"max_output_tokens": 1})
    assert events[-1][0] in ("response.completed", "response.incomplete")  # no [DONE] after it


def test_an_engine_failure_mid_stream_is_a_failed_response(tiny_entry, monkeypatch):
    break_engine_after(monkeypatch, 2)
    _, _, events = stream({"max_output_tokens": 20, "temperature": 0})
    check_stream_events(events)
    name, data = events[-1]
    assert name == "response.failed"
    response = data["response"]
    valid_response(response)
    assert response["status"] == "failed"
    assert response["error"]["code"] == "server_error"
    assert "device lost" not in json.dumps(events)
    assert StoredResponse.objects.get(pk=response["id"]).status == "failed"
    monkeypatch.undo()
    assert stream({"max_output_tokens": 1})[0] == 200  # the engine keeps serving


def test_a_bug_mid_stream_ends_with_an_error_event(tiny_entry, monkeypatch):
    def broken_feed(self, text):
        raise KeyError("bug in the parser")

    monkeypatch.setattr(ReplyParser, "feed", broken_feed)
    _, _, events = stream({"max_output_tokens": 5})
    check_stream_events(events)
    name, data = events[-1]
    assert name == "error"
    assert data["code"] == "server_error"
    assert "bug in" not in json.dumps(events)
    assert not StoredResponse.objects.filter(pk=events[0][1]["response"]["id"]).exists()


def test_stream_errors_before_the_stream_are_http_errors(tiny_entry):
    status, content_type, events = stream({"model": "nope"})
    assert (status, content_type) == (404, "application/json")
    assert events[0][1]["error"]["code"] == "model_not_found"


# ---------------------------------------------------- the scripted reasoning model (thinker)
# It thinks, then calls get_weather in Hermes syntax, its arguments spread over several tokens.

FLAT_WEATHER = {"type": "function", **WEATHER_TOOL["function"]}
ASK = {"model": "thinker", "input": "Weather in Paris?", "temperature": 0}


def think(client, **body) -> dict:
    response = client.post(RESPONSES, {**ASK, **body}, content_type="application/json")
    assert response.status_code == 200, response.content
    valid_response(response.json())
    return response.json()


def test_reasoning_then_a_function_call(client, scripted_entry):
    body = think(client, tools=[FLAT_WEATHER])
    reasoning, call = body["output"]
    assert reasoning["type"] == "reasoning"
    assert reasoning["id"].startswith("rs_")
    assert reasoning["summary"] == []
    assert reasoning["content"] == [{"type": "reasoning_text", "text": REASONING}]
    assert call["type"] == "function_call"
    assert (call["name"], call["arguments"], call["status"]) == (
        "get_weather",
        ARGUMENTS,
        "completed",
    )
    assert body["status"] == "completed"
    assert body["output_text"] == ""
    assert body["usage"]["output_tokens_details"]["reasoning_tokens"] > 0


def test_streamed_reasoning_and_arguments(client, scripted_entry):
    status, _, events = stream({**ASK, "tools": [FLAT_WEATHER]})
    assert status == 200
    check_stream_events(events)
    names = [name for name, _ in events]
    reasoning = [d["delta"] for n, d in events if n == "response.reasoning_text.delta"]
    arguments = [d["delta"] for n, d in events if n == "response.function_call_arguments.delta"]
    assert len(reasoning) > 1 and "".join(reasoning) == REASONING
    assert len(arguments) >= 4  # one piece per token the model wrote
    assert "".join(arguments) == ARGUMENTS
    assert names == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.reasoning_text.delta"] * len(reasoning),
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        *["response.function_call_arguments.delta"] * len(arguments),
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    added_reasoning, added_call = (d["item"] for n, d in events if n.endswith("item.added"))
    assert added_reasoning["type"] == "reasoning" and added_reasoning["status"] == "in_progress"
    assert added_call["type"] == "function_call" and added_call["arguments"] == ""
    done = next(d for n, d in events if n == "response.reasoning_text.done")
    assert done["text"] == REASONING
    final = events[-1][1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "function_call"]
    assert final["output"][1]["arguments"] == ARGUMENTS


def test_thinking_switched_off(client, scripted_entry):
    body = think(client, reasoning={"effort": "none"})
    assert [item["type"] for item in body["output"]] == ["message"]
    assert body["output_text"] == "It is sunny in Paris."
    assert body["usage"]["output_tokens_details"]["reasoning_tokens"] == 0


def test_without_tools_the_call_stays_text(client, scripted_entry):
    body = think(client)
    assert [item["type"] for item in body["output"]] == ["reasoning", "message"]
    assert body["output_text"].startswith("<tool_call>")


def test_reasoning_items_go_back_but_are_not_read_again(client, scripted_entry):
    first = think(client, tools=[FLAT_WEATHER])
    call = first["output"][1]
    result = {"type": "function_call_output", "call_id": call["call_id"], "output": "Sunny"}
    chained = think(client, tools=[FLAT_WEATHER], previous_response_id=first["id"], input=[result])
    # The same conversation sent whole, the reasoning item included: the same prompt.
    whole = think(
        client,
        tools=[FLAT_WEATHER],
        input=[{"role": "user", "content": "Weather in Paris?"}, *first["output"], result],
    )
    assert chained["usage"]["input_tokens"] == whole["usage"]["input_tokens"]
    without_reasoning = think(
        client,
        tools=[FLAT_WEATHER],
        input=[{"role": "user", "content": "Weather in Paris?"}, call, result],
    )
    assert without_reasoning["usage"]["input_tokens"] == whole["usage"]["input_tokens"]


def test_forced_call_does_not_think(client, scripted_entry):
    forced = {"type": "function", "name": "get_weather"}
    response = client.post(
        RESPONSES,
        {**ASK, "tools": [FLAT_WEATHER], "tool_choice": forced, "max_output_tokens": 3},
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert [item["type"] for item in body["output"]] == ["function_call"]
    assert_error(
        client.post(RESPONSES, {**ASK, "tool_choice": forced}, content_type="application/json"),
        400,
        "tool_choice",
    )


GEO = {"type": "namespace", "name": "geo", "description": "Places", "tools": [WEATHER]}


def test_a_namespace_function_is_called_with_its_namespace(client, tiny_entry):
    """Codex groups functions in namespace tools and reads a call's `namespace` apart from its
    `name`; a built-in tool it merely offers (web_search) is left out, not refused."""
    body = create(
        client,
        tools=[GEO, {"type": "web_search", "external_web_access": False}],
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=20,
        include=["reasoning.encrypted_content"],
        prompt_cache_key="session-1",
        client_metadata={"origin": "codex_exec"},
        store=False,
    ).json()
    valid_response(body)
    (call,) = body["output"]
    assert (call["name"], call["namespace"]) == ("get_weather", "geo")
    assert json.loads(call["arguments"])["city"] in ("Paris", "Rome")
    follow_up = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
        {k: call[k] for k in ("type", "id", "status", "call_id", "name", "namespace", "arguments")},
        {"type": "function_call_output", "call_id": call["call_id"], "output": "22C"},
    ]
    again = create(client, input=follow_up, tools=[GEO], max_output_tokens=4, store=False)
    assert again.status_code == 200, again.content
    assert again.json()["status"] in ("completed", "incomplete")


def test_plain_function_calls_carry_no_namespace(client, tiny_entry):
    body = create(client, **FORCED, max_output_tokens=20).json()
    assert "namespace" not in body["output"][0]
