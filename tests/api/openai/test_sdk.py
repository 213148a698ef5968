"""A real uvicorn server on a free port, the real SmolLM2, and the official openai SDK."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from tests.support.helpers import DEMO_ID, ROOT
from tests.support.live_server import ADMIN_TOKEN, LiveServer, demo_server, free_port

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def server(demo_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with demo_server(demo_gguf, tmp_path_factory.mktemp("server-var")) as server:
        yield server


@pytest.fixture(scope="module")
def api_key(server: LiveServer) -> str:
    return server.manage("create_api_key", "e2e").stdout.strip()


@pytest.fixture(scope="module")
def base_url(server: LiveServer) -> str:
    return server.api


@pytest.fixture(scope="module")
def client(base_url: str, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=120)


def test_lists_the_demo_model(client):
    assert DEMO_ID in [model.id for model in client.models.list()]
    assert client.models.retrieve(DEMO_ID).id == DEMO_ID


def test_chat_answers_paris(client):
    completion = client.chat.completions.create(
        model=DEMO_ID, messages=QUESTION, temperature=0, max_tokens=64
    )
    choice = completion.choices[0]
    assert "Paris" in choice.message.content
    assert choice.finish_reason == "stop"
    assert completion.usage.completion_tokens < 64
    assert completion.usage.total_tokens == (
        completion.usage.prompt_tokens + completion.usage.completion_tokens
    )


def test_chat_streams_paris(client):
    chunks = list(
        client.chat.completions.create(
            model=DEMO_ID,
            messages=QUESTION,
            temperature=0,
            max_tokens=64,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "Paris" in text
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop"
    assert all(reason is None for reason in finishes[:-1])
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == len(finishes) - 1
    assert len({c.id for c in chunks}) == 1


def test_streaming_and_plain_answers_agree(client):
    plain = client.chat.completions.create(
        model=DEMO_ID, messages=QUESTION, temperature=0, max_tokens=64
    )
    streamed = client.chat.completions.create(
        model=DEMO_ID, messages=QUESTION, temperature=0, max_tokens=64, stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text == plain.choices[0].message.content


def test_unknown_model_is_a_404(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="llama-70b", messages=QUESTION)
    assert caught.value.code == "model_not_found"
    assert caught.value.body["param"] == "model"


def test_out_of_range_parameter_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=DEMO_ID, messages=QUESTION, temperature=5)
    assert caught.value.body["param"] == "temperature"


def test_concurrent_streams_all_finish(client):
    def ask(n: int) -> str:
        stream = client.chat.completions.create(
            model=DEMO_ID,
            messages=[{"role": "user", "content": f"Count to {n}."}],
            temperature=0,
            max_tokens=16,
            stream=True,
        )
        return [c.choices[0].finish_reason for c in stream if c.choices][-1]

    with ThreadPoolExecutor(4) as pool:
        assert set(pool.map(ask, range(3, 7))) <= {"stop", "length"}


def running_sequences(base_url: str) -> int:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}  # /health's counts are for operators
    health = httpx.get(base_url.removesuffix("/v1") + "/health", headers=headers)
    return health.json()["running_sequences"]


def test_streaming_never_splits_a_character(client):
    messages = [{"role": "user", "content": "Write 'café, naïve, 東京 🎉' three times."}]
    deltas = [
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(
            model=DEMO_ID, messages=messages, temperature=0, max_tokens=48, stream=True
        )
        if c.choices
    ]
    text = "".join(deltas)
    assert any(ch in text for ch in "éï東🎉")  # the reply does contain multi-byte characters
    assert not any("\ufffd" in d for d in deltas)
    plain = client.chat.completions.create(
        model=DEMO_ID, messages=messages, temperature=0, max_tokens=48
    )
    assert plain.choices[0].message.content == text


def test_json_schema_answer_validates(client):
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 40},
            "is_capital": {"type": "boolean"},
        },
        "required": ["city", "is_capital"],
        "additionalProperties": False,
    }
    completion = client.chat.completions.create(
        model=DEMO_ID,
        messages=[{"role": "user", "content": "What is the capital of France? Answer in JSON."}],
        temperature=0,
        max_tokens=60,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema},
        },
    )
    answer = json.loads(completion.choices[0].message.content)
    assert set(answer) == {"city", "is_capital"}
    assert "Paris" in answer["city"]
    assert isinstance(answer["is_capital"], bool)


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 40}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def test_required_tool_call_through_the_sdk(client):
    messages = [{"role": "user", "content": "What's the weather in Paris?"}]
    completion = client.chat.completions.create(
        model=DEMO_ID,
        messages=messages,
        tools=[WEATHER_TOOL],
        tool_choice="required",
        temperature=0,
        max_tokens=60,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    assert "Paris" in json.loads(call.function.arguments)["city"]
    # The call and its result go back into the conversation.
    follow_up = client.chat.completions.create(
        model=DEMO_ID,
        messages=[
            *messages,
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "22 degrees and sunny"},
        ],
        tools=[WEATHER_TOOL],
        temperature=0,
        max_tokens=40,
    )
    assert follow_up.choices[0].finish_reason in {"stop", "length", "tool_calls"}


def test_streamed_tool_call_deltas(client):
    chunks = list(
        client.chat.completions.create(
            model=DEMO_ID,
            messages=[{"role": "user", "content": "Weather in Rome?"}],
            tools=[WEATHER_TOOL],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            temperature=0,
            max_tokens=60,
            stream=True,
        )
    )
    first, *rest = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    assert (first.index, first.type, first.function.name) == (0, "function", "get_weather")
    assert first.id.startswith("call_")
    # The arguments stream as the model writes them: name and id once, then pieces.
    assert len(rest) >= 2
    assert all((d.index, d.id, d.function.name) == (0, None, None) for d in rest)
    arguments = first.function.arguments + "".join(d.function.arguments for d in rest)
    assert "city" in json.loads(arguments)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_legacy_completion_through_the_sdk(client):
    completion = client.completions.create(
        model=DEMO_ID, prompt="The capital of France is", max_tokens=5, temperature=0, logprobs=2
    )
    choice = completion.choices[0]
    assert choice.text.startswith(" Paris")
    assert choice.logprobs.tokens[0] == " Paris"
    assert completion.object == "text_completion"


def test_n_choices_stream_with_their_index(client):
    chunks = list(
        client.chat.completions.create(
            model=DEMO_ID,
            messages=QUESTION,
            n=2,
            temperature=0.7,
            seed=11,
            max_tokens=24,
            stream=True,
            logprobs=True,
        )
    )
    finishes = {
        c.choices[0].index: c.choices[0].finish_reason
        for c in chunks
        if c.choices and c.choices[0].finish_reason
    }
    assert set(finishes) == {0, 1}
    assert any(c.choices[0].logprobs for c in chunks if c.choices)


def control(base_url: str, *args: str) -> subprocess.CompletedProcess:
    """manage.py warm|unload|pool against the live server, as an operator runs them."""
    server = base_url.removesuffix("/v1")
    return subprocess.run(
        [sys.executable, "manage.py", *args, "--url", server, "--token", ADMIN_TOKEN],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_operator_commands_against_the_live_server(base_url):
    unloaded = control(base_url, "unload", DEMO_ID)
    assert unloaded.returncode == 0, unloaded.stderr
    warmed = control(base_url, "warm", DEMO_ID)
    assert warmed.returncode == 0, warmed.stderr
    assert f"loaded {DEMO_ID} in" in warmed.stdout
    assert "warming" in warmed.stderr  # the progress line
    table = control(base_url, "pool")
    assert table.returncode == 0
    assert table.stdout.splitlines()[0].split()[:2] == ["model", "memory"]
    assert DEMO_ID in table.stdout
    again = control(base_url, "unload", DEMO_ID)
    assert f"unloaded {DEMO_ID}" in again.stdout


def test_operator_commands_fail_clearly(base_url):
    unknown = control(base_url, "warm", "no-such-model")
    assert unknown.returncode != 0
    assert "no enabled model named 'no-such-model'" in unknown.stderr
    unreachable = subprocess.run(
        [sys.executable, "manage.py", "pool", "--url", f"http://127.0.0.1:{free_port()}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unreachable.returncode != 0
    assert "cannot reach the server" in unreachable.stderr
    wrong_token = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "pool",
            "--url",
            base_url.removesuffix("/v1"),
            "--token",
            "x",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert wrong_token.returncode != 0
    assert "401" in wrong_token.stderr


def test_cancelled_stream_leaves_the_pool_status_at_once(base_url, client, api_key):
    server = base_url.removesuffix("/v1")
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    body = {
        "model": DEMO_ID,
        "messages": [{"role": "user", "content": "Write a long story about a dragon."}],
        "max_tokens": 500,
        "stream": True,
    }
    auth = {"Authorization": f"Bearer {api_key}"}
    with httpx.stream(
        "POST", f"{base_url}/chat/completions", json=body, headers=auth, timeout=60
    ) as response:
        lines = response.iter_lines()
        for _ in range(4):
            next(lines)
        status = httpx.get(f"{server}/control/pool", headers=headers).json()
        assert status["running_sequences"] == 1
    hung_up = time.monotonic()
    while time.monotonic() - hung_up < 1:
        status = httpx.get(f"{server}/control/pool", headers=headers).json()
        if status["running_sequences"] == 0:
            break
    assert status["running_sequences"] == 0
    assert running_sequences(base_url) == 0  # /health agrees
    completion = client.chat.completions.create(
        model=DEMO_ID, messages=QUESTION, temperature=0, max_tokens=16
    )
    assert "Paris" in completion.choices[0].message.content


def test_the_sdk_without_a_valid_key_gets_a_401(base_url):
    stranger = openai.OpenAI(base_url=base_url, api_key="sk-mlx-not-a-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        stranger.chat.completions.create(model=DEMO_ID, messages=QUESTION, max_tokens=4)
    assert caught.value.code == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        stranger.models.list()
