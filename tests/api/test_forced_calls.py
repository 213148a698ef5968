"""Forced tool calls with the catalog's default sampling (what `make serve` sets for the demo:
temperature 0.2, top_p 0.9) parse every time, in chat, Messages and Responses: the grammar
closes the arguments object, so the model cannot ramble extra keys until max_tokens.

The schema says nothing about additionalProperties, as most clients' schemas don't."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.helpers import DEMO_ID
from tests.support.live_server import LiveServer, live_server

# Runs once (SQLite pass): what the grammar lets the model write; the catalog row is only read, so
# PostgreSQL would only repeat it.
pytestmark = pytest.mark.database_independent

TRIES = 20
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
DESCRIPTION = "The current weather in a city"
ASK = "What is the weather like in Paris today?"
MAX_TOKENS = 64  # a closed call takes about 8; an open one rambles past this


@pytest.fixture(scope="module")
def server(demo_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    defaults = ("--temperature", "0.2", "--top-p", "0.9", "--max-tokens", "1024")
    setup = ("import_gguf", str(demo_gguf), "--id", DEMO_ID, *defaults)
    with live_server(tmp_path_factory.mktemp("forced-var"), setup) as server:
        yield server


def chat_call(server: LiveServer) -> Callable[[], str]:
    client = server.openai()
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": CITY}}
    tool["function"]["description"] = DESCRIPTION

    def call() -> str:
        completion = client.chat.completions.create(
            model=DEMO_ID,
            messages=[{"role": "user", "content": ASK}],
            tools=[tool],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=MAX_TOKENS,
        )
        assert completion.choices[0].finish_reason in ("stop", "tool_calls")
        return completion.choices[0].message.tool_calls[0].function.arguments

    return call


def messages_call(server: LiveServer) -> Callable[[], str]:
    client = server.anthropic()
    tool = {"name": "get_weather", "description": DESCRIPTION, "input_schema": CITY}

    def call() -> str:
        message = client.messages.create(
            model=DEMO_ID,
            max_tokens=MAX_TOKENS,
            messages=[{"role": "user", "content": ASK}],
            tools=[tool],
            tool_choice={"type": "tool", "name": "get_weather"},
        )
        assert message.stop_reason == "tool_use", message
        return json.dumps(message.content[-1].input)

    return call


def responses_call(server: LiveServer) -> Callable[[], str]:
    client = server.openai()
    tool = {"type": "function", "name": "get_weather", "description": DESCRIPTION}

    def call() -> str:
        response = client.responses.create(
            model=DEMO_ID,
            input=ASK,
            tools=[{**tool, "parameters": CITY, "strict": False}],
            tool_choice={"type": "function", "name": "get_weather"},
            max_output_tokens=MAX_TOKENS,
            store=False,
        )
        assert response.status == "completed", response
        calls = [item for item in response.output if item.type == "function_call"]
        return calls[0].arguments

    return call


@pytest.mark.parametrize("dialect", [chat_call, messages_call, responses_call])
def test_forced_calls_parse_every_time(server, dialect):
    call = dialect(server)
    with ThreadPoolExecutor(max_workers=8) as pool:
        arguments = list(pool.map(lambda _: call(), range(TRIES)))
    parsed = [json.loads(text) for text in arguments]
    assert all(set(value) == {"city"} and isinstance(value["city"], str) for value in parsed), (
        arguments
    )
