"""The client libraries people point at an OpenAI- or Anthropic-compatible server, each driven
against one real uvicorn server: the real SmolLM2 with `make serve`'s catalog defaults, the real
all-MiniLM-L6-v2, API keys required. LangChain, LiteLLM, the OpenAI Agents SDK, pydantic-ai and
instructor from Python; the Vercel AI SDK from node (tests/clients/js).

A 135M model does not choose tools by itself, so every tool check forces the call, and
structured output uses each library's JSON-schema mode (response_format json_schema, or a
forced tool): the server decodes both under the schema's grammar, so what comes back parses."""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic import BaseModel, Field

from tests.support.helpers import DEMO_ID, ROOT
from tests.support.live_server import LiveServer, live_server

# Client compatibility is a matter of the wire, not of the server's database: `make test`'s
# PostgreSQL pass would only repeat these minutes (its own pytestmark, below).
pytestmark = pytest.mark.database_independent

# What `make serve` gives the demo model (the Makefile's DEMO_DEFAULTS).
DEMO_DEFAULTS = ("--temperature", "0.2", "--top-p", "0.9", "--max-tokens", "1024")
EMBEDDING_ID = "all-minilm-l6-v2"
JS = ROOT / "tests/clients/js"

CAPITAL = "What is the capital of France?"
WEATHER = "What's the weather in Paris?"
NAME_A_CITY = "Name a city in France."
# Greedy, and short enough that a reply which never ends fails in seconds, not 1024 tokens.
GREEDY = {"temperature": 0, "max_tokens": 100}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 40}},
            "required": ["city"],
        },
    },
}


class City(BaseModel):
    """A city and the country it is in."""

    name: str = Field(max_length=40)
    country: str = Field(max_length=40)


def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"22 degrees and sunny in {city}"


def assert_city(city: object) -> None:
    assert isinstance(city, City)
    assert city.name.strip() and city.country.strip()


@pytest.fixture(scope="module")
def server(
    demo_gguf: Path, demo_embedding: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    setup = (
        ("import_gguf", str(demo_gguf), "--id", DEMO_ID, *DEMO_DEFAULTS),
        ("add_model", EMBEDDING_ID, "--embedding", "--local", str(demo_embedding)),
    )
    var = tmp_path_factory.mktemp("clients-var")
    with live_server(var, *setup, REQUIRE_API_KEY="true") as server:
        yield server


@pytest.fixture(scope="module")
def api_key(server: LiveServer) -> str:
    return server.manage("create_api_key", "clients").stdout.strip()


# --- LangChain ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def langchain_models(server: LiveServer, api_key: str) -> dict[str, Any]:
    from langchain_anthropic import ChatAnthropic
    from langchain_openai import ChatOpenAI

    common = {"model": DEMO_ID, "api_key": api_key, "max_retries": 0, "timeout": 120, **GREEDY}
    return {
        "openai": ChatOpenAI(base_url=server.api, **common),
        # ChatAnthropic adds /v1/messages to the server's root, as the anthropic SDK does.
        "anthropic": ChatAnthropic(base_url=server.url, **common),
    }


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_langchain_bind_tools_forced(langchain_models, dialect):
    from langchain_core.tools import tool

    chat = langchain_models[dialect].bind_tools([tool(get_weather)], tool_choice="get_weather")
    message = chat.invoke(WEATHER)
    (call,) = message.tool_calls
    assert call["name"] == "get_weather"
    assert set(call["args"]) == {"city"} and call["args"]["city"]
    assert call["id"] and not message.invalid_tool_calls


# ChatOpenAI's json_schema method sends response_format json_schema; ChatAnthropic's
# function_calling forces a tool made from the model (the server has no output_format).
@pytest.mark.parametrize(
    "dialect, method", [("openai", "json_schema"), ("anthropic", "function_calling")]
)
def test_langchain_with_structured_output(langchain_models, dialect, method):
    chat = langchain_models[dialect].with_structured_output(City, method=method)
    assert_city(chat.invoke(NAME_A_CITY))


# --- LiteLLM -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def litellm() -> Iterator[ModuleType]:
    with pytest.MonkeyPatch.context() as patch:
        # Its import would otherwise fetch a price list from GitHub (and retry, offline).
        patch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

    litellm.suppress_debug_info = True  # no "Provider List" banner for an unpriced model
    yield litellm


def litellm_target(server: LiveServer, provider: str) -> dict[str, str]:
    # LiteLLM's anthropic provider adds /v1/messages to api_base; its openai provider, like
    # the openai SDK, wants the /v1 base.
    base = server.api if provider == "openai" else server.url
    return {"model": f"{provider}/{DEMO_ID}", "api_base": base}


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_litellm_completion(litellm, server, api_key, provider):
    response = litellm.completion(
        **litellm_target(server, provider),
        api_key=api_key,
        messages=[{"role": "user", "content": CAPITAL}],
        **GREEDY,
    )
    choice = response.choices[0]
    assert "Paris" in choice.message.content
    assert choice.finish_reason == "stop"
    assert response.usage.completion_tokens > 0


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_litellm_forced_tool(litellm, server, api_key, provider):
    response = litellm.completion(
        **litellm_target(server, provider),
        api_key=api_key,
        messages=[{"role": "user", "content": WEATHER}],
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        **GREEDY,
    )
    choice = response.choices[0]
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    assert set(json.loads(call.function.arguments)) == {"city"}
    assert choice.finish_reason == "tool_calls"


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.hypot(*a) / math.hypot(*b)


def test_litellm_embedding(litellm, server, api_key):
    texts = ["a sunny day in Paris", "a rainy night in Oslo", "a sunny afternoon in Paris"]
    response = litellm.embedding(
        model=f"openai/{EMBEDDING_ID}", api_base=server.api, api_key=api_key, input=texts
    )
    vectors = [item["embedding"] for item in response.data]
    assert [len(vector) for vector in vectors] == [384] * 3
    # The real model puts the two sunny Parises nearer each other than the rainy Oslo.
    assert cosine(vectors[0], vectors[2]) > cosine(vectors[0], vectors[1])
    assert response.usage.prompt_tokens > 0


# --- OpenAI Agents SDK -------------------------------------------------------------------


async def run_agent(server: LiveServer, api_key: str, api: str, **agent: Any) -> Any:
    """Runs an agent on `api` (chat or responses), with its own client on this run's loop."""
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # or it would send traces to OpenAI
    client = AsyncOpenAI(base_url=server.api, api_key=api_key, max_retries=0, timeout=120)
    kind = OpenAIChatCompletionsModel if api == "chat" else OpenAIResponsesModel
    try:
        model = kind(model=DEMO_ID, openai_client=client)
        prompt = agent.pop("prompt")
        return await Runner.run(Agent(name="assistant", model=model, **agent), prompt, max_turns=3)
    finally:
        await client.close()


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_agents_function_tool(server, api_key, api):
    from agents import ModelSettings, ToolCallItem, ToolCallOutputItem, function_tool

    cities: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        cities.append(city)
        return f"22 degrees and sunny in {city}"

    # Forced by name; the SDK resets tool_choice after the call, so the next turn answers.
    settings = ModelSettings(tool_choice="get_weather", temperature=0, max_tokens=100)
    result = asyncio.run(
        run_agent(
            server, api_key, api, prompt=WEATHER, tools=[get_weather], model_settings=settings
        )
    )
    assert len(cities) == 1 and cities[0]
    kinds = [type(item) for item in result.new_items]
    assert kinds[:2] == [ToolCallItem, ToolCallOutputItem]
    assert isinstance(result.final_output, str) and result.final_output


# output_type makes the SDK send a strict json_schema (response_format on chat, text.format
# on Responses).
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_agents_structured_output(server, api_key, api):
    from agents import ModelSettings

    settings = ModelSettings(temperature=0, max_tokens=100)
    result = asyncio.run(
        run_agent(
            server, api_key, api, prompt=NAME_A_CITY, output_type=City, model_settings=settings
        )
    )
    assert_city(result.final_output)


# --- pydantic-ai -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pydantic_ai_model(server: LiveServer, api_key: str) -> Any:
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    return OpenAIChatModel(DEMO_ID, provider=OpenAIProvider(base_url=server.api, api_key=api_key))


def test_pydantic_ai_function_tool(pydantic_ai_model):
    from pydantic_ai import Agent, RunContext
    from pydantic_ai.messages import ToolCallPart, ToolReturnPart

    def settings(ctx: RunContext) -> dict:
        # The call is forced on the first step only (pydantic-ai's way: settings per step),
        # then tools are off, so the run ends with the model's text.
        return {**GREEDY, "tool_choice": ["get_weather"] if ctx.run_step == 1 else "none"}

    cities: list[str] = []
    agent = Agent(pydantic_ai_model, model_settings=settings)

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        cities.append(city)
        return f"22 degrees and sunny in {city}"

    result = agent.run_sync(WEATHER)
    assert len(cities) == 1 and cities[0]
    parts = [type(part) for message in result.all_messages() for part in message.parts]
    assert ToolCallPart in parts and ToolReturnPart in parts
    assert isinstance(result.output, str) and result.output


# The default output mode is a final_result tool the agent requires (tool_choice required);
# NativeOutput sends response_format json_schema instead.
@pytest.mark.parametrize("native", [False, True], ids=["tool_output", "native_output"])
def test_pydantic_ai_structured_output(pydantic_ai_model, native):
    from pydantic_ai import Agent
    from pydantic_ai.output import NativeOutput

    output = NativeOutput(City) if native else City
    agent = Agent(pydantic_ai_model, output_type=output, model_settings=GREEDY)
    assert_city(agent.run_sync(NAME_A_CITY).output)


# --- instructor --------------------------------------------------------------------------


# TOOLS forces a tool made from the response model; JSON_SCHEMA sends response_format
# json_schema. (Its JSON and MD_JSON modes would let the model free-write.)
@pytest.mark.parametrize("mode", ["TOOLS", "JSON_SCHEMA"])
def test_instructor_response_model(server, api_key, mode):
    import instructor
    from openai import OpenAI

    openai = OpenAI(base_url=server.api, api_key=api_key, max_retries=0, timeout=120)
    client = instructor.from_openai(openai, mode=instructor.Mode[mode])
    city, completion = client.chat.completions.create_with_completion(
        model=DEMO_ID,
        response_model=City,
        max_retries=0,  # instructor's own retries would hide a reply that did not validate
        messages=[{"role": "user", "content": NAME_A_CITY}],
        **GREEDY,
    )
    assert_city(city)
    message = completion.choices[0].message
    if mode == "TOOLS":
        assert message.tool_calls[0].function.name == "City"
    else:
        # instructor hands back its own subclass of City: compare the fields.
        assert City.model_validate_json(message.content).model_dump() == city.model_dump()


# --- Vercel AI SDK (node) ----------------------------------------------------------------


def run_js(script: str, server: LiveServer, api_key: str, model: str = DEMO_ID) -> dict:
    """`node tests/clients/js/<script>.mjs <base_url> <model>`: the check's JSON output."""
    if not (JS / "node_modules/ai").is_dir():
        pytest.fail(f"the AI SDK is not installed in {JS}: run scripts/ensure_js_clients.sh")
    done = subprocess.run(
        ["node", str(JS / f"{script}.mjs"), server.api, model],
        env={**os.environ, "API_KEY": api_key},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, f"{script}.mjs failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout)


def test_ai_sdk_generate_text(server, api_key):
    result = run_js("generate_text", server, api_key)
    assert "Paris" in result["text"]
    assert result["finishReason"] == "stop"
    assert result["usage"]["outputTokens"] > 0


def test_ai_sdk_stream_text(server, api_key):
    result = run_js("stream_text", server, api_key)
    assert len(result["chunks"]) > 1 and "Paris" in "".join(result["chunks"])
    assert result["finishReason"] == "stop"
    assert result["usage"]["outputTokens"] > 0  # the stream's usage chunk (include_usage)


def test_ai_sdk_generate_object(server, api_key):
    result = run_js("generate_object", server, api_key)
    assert_city(City.model_validate(result["object"]))
    assert result["finishReason"] == "stop"


def test_ai_sdk_forced_tool(server, api_key):
    result = run_js("forced_tool", server, api_key)
    (call,) = result["toolCalls"]
    assert call["toolName"] == "get_weather"
    assert set(call["input"]) == {"city"} and call["input"]["city"]
    assert result["finishReason"] == "tool-calls"


def test_ai_sdk_embed_many(server, api_key):
    result = run_js("embed_many", server, api_key, model=EMBEDDING_ID)
    vectors = result["embeddings"]
    assert [len(vector) for vector in vectors] == [384] * 3
    assert cosine(vectors[0], vectors[2]) > cosine(vectors[0], vectors[1])
    assert result["usage"]["tokens"] > 0
