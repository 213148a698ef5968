"""A real uvicorn server, the real SmolLM2 and the official anthropic SDK: Messages as Claude
clients use it, with API keys required (x-api-key, or a bearer token as Claude Code sends)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest

from tests.support.helpers import DEMO_ID
from tests.support.live_server import LiveServer, demo_server

# Its servers have their own databases and store nothing a request says: the PostgreSQL pass
# would only repeat it (tests/conftest.py).
pytestmark = pytest.mark.database_independent

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
WEATHER = {
    "name": "get_weather",
    "description": "Current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 40}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
FORCED = {"type": "tool", "name": "get_weather"}


@pytest.fixture(scope="module")
def server(demo_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with demo_server(demo_gguf, tmp_path_factory.mktemp("anthropic-var")) as server:
        yield server


@pytest.fixture(scope="module")
def api_key(server: LiveServer) -> str:
    return server.manage("create_api_key", "claude").stdout.strip()


@pytest.fixture(scope="module")
def client(server: LiveServer, api_key: str) -> anthropic.Anthropic:
    # The SDK sends the key as x-api-key and adds /v1/messages to the server's root.
    return server.anthropic(api_key)


# SDK 2 dropped sampling arguments (newer Claude models fix them); the API still takes them.
GREEDY = {"temperature": 0}


def ask(
    client: anthropic.Anthropic, extra: dict | None = None, **overrides
) -> anthropic.types.Message:
    body = {"model": DEMO_ID, "messages": QUESTION, "max_tokens": 64}
    return client.messages.create(**{**body, **overrides}, extra_body={**GREEDY, **(extra or {})})


def text_of(message: anthropic.types.Message) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


def test_create_answers_paris(client):
    message = ask(client)
    assert "Paris" in text_of(message)
    assert message.stop_reason == "end_turn"
    assert message.id.startswith("msg_")
    assert message.role == "assistant" and message.model == DEMO_ID
    assert 0 < message.usage.output_tokens < 64


def test_stream_and_final_message_agree_with_create(client):
    with client.messages.stream(
        model=DEMO_ID, messages=QUESTION, max_tokens=64, extra_body=GREEDY
    ) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert "Paris" in streamed
    assert text_of(final) == streamed == text_of(ask(client))
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens > 0


def test_count_tokens_matches_create(client):
    system = "You answer geography questions."
    counted = client.messages.count_tokens(
        model=DEMO_ID, messages=QUESTION, system=system, tools=[WEATHER]
    ).input_tokens
    usage = ask(client, system=system, tools=[WEATHER], max_tokens=4).usage
    # Anthropic counts prefix-cache reads apart from input_tokens; together: the whole prompt.
    assert counted == usage.input_tokens + usage.cache_read_input_tokens
    assert usage.cache_creation_input_tokens == 0
    assert counted > client.messages.count_tokens(model=DEMO_ID, messages=QUESTION).input_tokens


def test_stop_sequence(client):
    answer = text_of(ask(client))
    message = ask(client, stop_sequences=["Paris"])
    assert message.stop_reason == "stop_sequence"
    assert message.stop_sequence == "Paris"
    assert text_of(message) == answer[: answer.index("Paris")]


def test_max_tokens_stop_reason(client):
    message = ask(client, max_tokens=3)
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 3


def test_forced_tool_call(client):
    weather = [{"role": "user", "content": "What's the weather in Paris?"}]
    message = ask(client, messages=weather, tools=[WEATHER], tool_choice=FORCED)
    assert message.stop_reason == "tool_use"
    (call,) = message.content
    assert call.type == "tool_use" and call.name == "get_weather"
    assert call.id.startswith("toolu_")
    assert set(call.input) == {"city"} and "Paris" in call.input["city"]
    with client.messages.stream(
        model=DEMO_ID,
        messages=weather,
        tools=[WEATHER],
        tool_choice=FORCED,
        max_tokens=64,
        extra_body=GREEDY,
    ) as stream:
        final = stream.get_final_message()  # the SDK parses the streamed partial JSON
    assert final.content[0].input == call.input
    assert final.stop_reason == "tool_use"


def test_tool_round_trip(client):
    weather = [{"role": "user", "content": "What's the weather in Paris?"}]
    call = ask(client, messages=weather, tools=[WEATHER], tool_choice=FORCED)
    tool_use = call.content[0]
    answer = ask(
        client,
        tools=[WEATHER],
        messages=[
            *weather,
            {"role": "assistant", "content": call.content},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": tool_use.id,
                        "content": "22 degrees and sunny",
                    }
                ],
            },
        ],
    )
    assert answer.stop_reason in {"end_turn", "max_tokens", "tool_use"}
    assert answer.content


def test_bearer_auth_token_as_claude_code_sends(server, api_key):
    bearer = anthropic.Anthropic(base_url=server.url, auth_token=api_key, max_retries=0)
    message = bearer.messages.create(model=DEMO_ID, messages=QUESTION, max_tokens=2)
    assert message.usage.output_tokens == 2


def test_errors_are_anthropic_errors(server, client):
    stranger = server.anthropic("sk-mlx-nope")
    with pytest.raises(anthropic.AuthenticationError) as caught:
        stranger.messages.create(model=DEMO_ID, messages=QUESTION, max_tokens=2)
    assert caught.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.NotFoundError) as caught:
        ask(client, model="no-such-claude")
    assert caught.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as caught:
        ask(client, extra={"temperature": 1.5})
    assert "temperature" in caught.value.body["error"]["message"]
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    with pytest.raises(anthropic.BadRequestError) as caught:
        ask(client, messages=[{"role": "user", "content": [image]}])
    assert "not supported" in caught.value.message
