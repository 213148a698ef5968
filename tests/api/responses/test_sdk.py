"""The Responses API through the official openai SDK, against a real uvicorn server running
the real SmolLM2 with API keys required, as deployed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from openai.types.responses import ResponseFunctionToolCall

from tests.support.helpers import DEMO_ID
from tests.support.live_server import LiveServer, demo_server

QUESTION = "What is the capital of France?"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


@pytest.fixture(scope="module")
def server(demo_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with demo_server(demo_gguf, tmp_path_factory.mktemp("responses-server")) as server:
        yield server


def make_client(server: LiveServer, name: str) -> openai.OpenAI:
    secret = server.manage("create_api_key", name).stdout.strip()
    return server.openai(secret)


@pytest.fixture(scope="module")
def client(server: LiveServer) -> openai.OpenAI:
    return make_client(server, "responses-sdk")


@pytest.fixture(scope="module")
def other_client(server: LiveServer) -> openai.OpenAI:
    return make_client(server, "responses-sdk-other")


def ask(client: openai.OpenAI, **kwargs):
    body = {"model": DEMO_ID, "input": QUESTION, "temperature": 0, "max_output_tokens": 64}
    return client.responses.create(**{**body, **kwargs})


def test_create_answers_paris(client):
    response = ask(client)
    assert response.id.startswith("resp_")
    assert response.status == "completed"
    assert "Paris" in response.output_text
    assert response.output[0].type == "message"
    usage = response.usage
    assert 0 < usage.output_tokens < 64
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


def test_stream_events_and_text(client):
    plain = ask(client)
    events = list(ask(client, stream=True))
    types = [event.type for event in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == plain.output_text
    assert events[-1].response.output_text == text


def test_stream_helper_final_response(client):
    with client.responses.stream(
        model=DEMO_ID, input=QUESTION, temperature=0, max_output_tokens=64
    ) as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.status == "completed"
    assert "Paris" in final.output_text
    assert "".join(deltas) == final.output_text
    assert client.responses.retrieve(final.id).output_text == final.output_text


def test_retrieve_returns_the_same_response(client):
    created = ask(client, metadata={"case": "retrieve"})
    retrieved = client.responses.retrieve(created.id)
    assert retrieved.model_dump() == created.model_dump()
    assert retrieved.metadata == {"case": "retrieve"}


def test_follow_up_remembers_the_first_turn(client):
    first = client.responses.create(
        model=DEMO_ID, input="The secret word is banana.", temperature=0, max_output_tokens=48
    )
    second = client.responses.create(
        model=DEMO_ID,
        input="What is the secret word?",
        previous_response_id=first.id,
        temperature=0,
        max_output_tokens=48,
    )
    assert second.previous_response_id == first.id
    assert "banana" in second.output_text.lower()
    alone = client.responses.create(
        model=DEMO_ID, input="What is the secret word?", temperature=0, max_output_tokens=48
    )
    assert "banana" not in alone.output_text.lower()  # it is the chain that told it
    assert second.usage.input_tokens > alone.usage.input_tokens


def test_function_call_round_trip(client):
    called = client.responses.create(
        model=DEMO_ID,
        input="What is the weather like in Paris today?",
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        temperature=0,
        max_output_tokens=64,
    )
    (call,) = called.output
    assert isinstance(call, ResponseFunctionToolCall)
    assert call.name == "get_weather"
    arguments = json.loads(call.arguments)
    assert isinstance(arguments["city"], str)
    answered = client.responses.create(
        model=DEMO_ID,
        previous_response_id=called.id,
        tools=[WEATHER],
        input=[
            {
                "type": "function_call_output",
                "call_id": call.call_id,
                "output": json.dumps({"city": arguments["city"], "weather": "sunny, 24 C"}),
            }
        ],
        temperature=0,
        max_output_tokens=64,
    )
    assert answered.output[0].type == "message"
    assert answered.output_text.strip()
    items = client.responses.input_items.list(answered.id, order="asc")
    assert [item.type for item in items.data] == ["function_call_output"]


def test_json_schema_output(client):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "required": ["city", "country"],
        "additionalProperties": False,
    }
    response = client.responses.create(
        model=DEMO_ID,
        input="Name the capital of France and its country, as JSON.",
        text={"format": {"type": "json_schema", "name": "capital", "schema": schema}},
        temperature=0,
        max_output_tokens=64,
    )
    assert response.status == "completed"
    value = json.loads(response.output_text)
    assert set(value) == {"city", "country"}
    assert all(isinstance(v, str) for v in value.values())


def test_delete_then_retrieve_is_not_found(client):
    created = ask(client, max_output_tokens=4)
    deleted = client.responses.delete(created.id)
    assert deleted is None  # the SDK returns nothing for a successful delete
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)


def test_input_items_list(client):
    created = client.responses.create(
        model=DEMO_ID,
        instructions="Be brief.",
        input=[
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi! How can I help?"},
            {"role": "user", "content": [{"type": "input_text", "text": QUESTION}]},
        ],
        temperature=0,
        max_output_tokens=32,
    )
    page = client.responses.input_items.list(created.id, order="asc")
    assert [item.role for item in page.data] == ["user", "assistant", "user"]
    assert all(item.id.startswith("msg_") for item in page.data)
    newest_first = client.responses.input_items.list(created.id, limit=2)
    assert [item.id for item in newest_first.data] == [item.id for item in page.data[::-1][:2]]
    assert newest_first.has_more is True
    everything = list(client.responses.input_items.list(created.id, limit=1, order="asc"))
    assert [item.id for item in everything] == [item.id for item in page.data]


def test_another_key_cannot_see_it(client, other_client):
    created = ask(client, max_output_tokens=4)
    with pytest.raises(openai.NotFoundError):
        other_client.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError) as caught:
        other_client.responses.create(
            model=DEMO_ID, input="Go on", previous_response_id=created.id, max_output_tokens=4
        )
    assert caught.value.code == "previous_response_not_found"
    assert client.responses.retrieve(created.id).id == created.id


def test_errors_through_the_sdk(client, server):
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.create(model="llama-70b", input=QUESTION)
    assert caught.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, tools=[{"type": "web_search"}], tool_choice={"type": "web_search"})
    assert caught.value.body["param"] == "tool_choice"
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=DEMO_ID, input=QUESTION, temperature=5)
    assert caught.value.body["param"] == "temperature"
    keyless = server.openai("sk-wrong")
    with pytest.raises(openai.AuthenticationError):
        keyless.responses.create(model=DEMO_ID, input=QUESTION)
