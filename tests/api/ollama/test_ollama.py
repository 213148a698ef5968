"""Ollama's API (/api/*) with the official `ollama` Python client against a real uvicorn server
serving the real SmolLM2, the scripted reasoning model (tests/support/scripted.py: thinking, then a
Hermes tool call) and all-MiniLM-L6-v2, API keys required: chat and generate streamed (NDJSON)
and not, format as a JSON schema, tools, think, options as sampling, embed, the listings, the
keep_alive that unloads, and Ollama's {"error": ...} for what is wrong."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import jsonschema
import ollama
import pytest

from tests.support.helpers import DEMO_ID
from tests.support.live_server import LiveServer, live_server
from tests.support.scripted import ARGUMENTS, REASONING, WEATHER_TOOL

# Each server has its own SQLite; nothing here depends on the suite's database.
pytestmark = pytest.mark.database_independent

THINKER = "thinker"
EMBEDDER = "minilm"
HELLO = [{"role": "user", "content": "Say hello."}]
SHORT = {"num_predict": 8, "temperature": 0}


@pytest.fixture(scope="module")
def server(
    demo_gguf: Path,
    scripted_dir: Path,
    demo_embedding: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LiveServer]:
    setup = (
        ("import_gguf", str(demo_gguf), "--id", DEMO_ID),
        ("add_model", THINKER, "--local", str(scripted_dir), "--family", "qwen3"),
        ("add_model", EMBEDDER, "--embedding", "--local", str(demo_embedding)),
    )
    var = tmp_path_factory.mktemp("ollama-var")
    with live_server(var, *setup, REQUIRE_API_KEY="true") as server:
        yield server


@pytest.fixture(scope="module")
def headers(server: LiveServer) -> dict[str, str]:
    key = server.manage("create_api_key", "ollama").stdout.strip()
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def client(server: LiveServer, headers: dict[str, str]) -> ollama.Client:
    return ollama.Client(host=server.url, headers=headers, timeout=120)


def test_chat_whole_and_streamed(client: ollama.Client) -> None:
    whole = client.chat(model=f"{DEMO_ID}:latest", messages=HELLO, stream=False, options=SHORT)
    assert whole.model == f"{DEMO_ID}:latest"  # the name as the client sent it
    assert whole.done and whole.done_reason in ("stop", "length")
    assert whole.message.role == "assistant" and whole.message.content
    assert whole.eval_count <= 8 and whole.prompt_eval_count > 0
    assert whole.total_duration >= whole.eval_duration > 0
    parts = list(client.chat(model=DEMO_ID, messages=HELLO, options=SHORT, stream=True))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done
    assert parts[-1].eval_count == whole.eval_count  # greedy: the same reply
    assert "".join(p.message.content for p in parts) == whole.message.content
    assert parts[0].total_duration is None  # the timings come with the last object only


def test_stream_is_ndjson_by_default(server: LiveServer, headers: dict[str, str]) -> None:
    body = {"model": DEMO_ID, "prompt": "Hi", "options": SHORT}  # no "stream": Ollama streams
    response = httpx.post(f"{server.url}/api/generate", json=body, headers=headers, timeout=120)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert len(lines) > 1 and lines[-1]["done"] is True and "done_reason" in lines[-1]
    for key in ("total_duration", "load_duration", "prompt_eval_count", "eval_count"):
        assert isinstance(lines[-1][key], int)


def test_generate_raw_and_templated(client: ollama.Client) -> None:
    parts = client.generate(
        model=DEMO_ID, prompt="The capital of France is", options=SHORT, stream=True
    )
    assert "".join(part.response for part in parts)
    raw = client.generate(
        model=DEMO_ID, prompt="The capital of France is", raw=True, options=SHORT, stream=False
    )
    assert raw.done and raw.response and raw.eval_count <= 8


def test_format_json_schema(client: ollama.Client) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
    ask = [{"role": "user", "content": "Describe a person as JSON."}]
    reply = client.chat(
        model=DEMO_ID, messages=ask, format=schema, options={"num_predict": 64, "temperature": 0}
    )
    jsonschema.validate(json.loads(reply.message.content), schema)
    loose = client.generate(
        model=DEMO_ID, prompt="A JSON object:", format="json", options={"num_predict": 48}
    )
    assert loose.response.lstrip().startswith("{")  # "json": any object, under its grammar
    if loose.done_reason == "stop":
        assert isinstance(json.loads(loose.response), dict)


def test_seed_and_num_predict(client: ollama.Client) -> None:
    options = {"seed": 7, "temperature": 1.0, "top_k": 40, "num_predict": 12}
    first = client.chat(model=DEMO_ID, messages=HELLO, options=options)
    again = client.chat(model=DEMO_ID, messages=HELLO, options=options)
    assert first.message.content == again.message.content
    assert first.eval_count <= 12
    cut = client.chat(model=DEMO_ID, messages=HELLO, options={"num_predict": 3})
    assert cut.eval_count == 3 and cut.done_reason == "length"


def test_tools_arguments_are_an_object(client: ollama.Client) -> None:
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    reply = client.chat(model=THINKER, messages=ask, tools=[WEATHER_TOOL], think=True)
    (call,) = reply.message.tool_calls
    assert call.function.name == "get_weather"
    assert call.function.arguments == json.loads(ARGUMENTS)
    assert reply.message.thinking.strip() == REASONING
    streamed = list(
        client.chat(model=THINKER, messages=ask, tools=[WEATHER_TOOL], think=True, stream=True)
    )
    calls = [c for part in streamed for c in part.message.tool_calls or []]
    assert [c.function.arguments for c in calls] == [json.loads(ARGUMENTS)]
    thinking = "".join(part.message.thinking or "" for part in streamed)
    assert thinking.strip() == REASONING
    # The call's result goes back as a tool message, named by its tool.
    follow = [
        *ask,
        {"role": "assistant", "content": "", "tool_calls": [c.model_dump() for c in calls]},
        {"role": "tool", "tool_name": "get_weather", "content": "sunny"},
    ]
    assert client.chat(model=THINKER, messages=follow, tools=[WEATHER_TOOL], think=False).done


def test_think_false_is_plain(client: ollama.Client) -> None:
    reply = client.chat(model=THINKER, messages=HELLO, think=False)
    assert reply.message.content == "It is sunny in Paris." and not reply.message.thinking


def test_embed_and_legacy_embeddings(client: ollama.Client) -> None:
    both = client.embed(model=f"{EMBEDDER}:latest", input=["a cat", "a dog"])
    assert len(both.embeddings) == 2 and len(both.embeddings[0]) == 384
    assert both.prompt_eval_count > 0
    one = client.embeddings(model=EMBEDDER, prompt="a cat")
    assert one.embedding == pytest.approx(both.embeddings[0], abs=1e-5)
    cut = client.embed(model=EMBEDDER, input="a cat", dimensions=8)
    assert len(cut.embeddings[0]) == 8


def test_tags_show_version(client: ollama.Client, server: LiveServer) -> None:
    listed = {m.model: m for m in client.list().models}
    assert {f"{DEMO_ID}:latest", f"{THINKER}:latest", f"{EMBEDDER}:latest"} <= set(listed)
    demo = listed[f"{DEMO_ID}:latest"]
    assert demo.size > 0 and len(demo.digest) == 64
    assert demo.details.family == "llama" and demo.details.quantization_level == "Q4"
    assert demo.details.parameter_size.endswith("M")
    shown = client.show(f"{DEMO_ID}:latest")
    assert "completion" in shown.capabilities and shown.details.family == "llama"
    assert shown.modelinfo["general.architecture"] == "llama"
    assert client.show(EMBEDDER).capabilities == ["embedding"]
    version = httpx.get(f"{server.url}/api/version", timeout=10).json()  # no key needed
    assert version["version"]


def test_load_keep_alive_and_ps(client: ollama.Client) -> None:
    client.chat(model=DEMO_ID, messages=HELLO, options=SHORT, keep_alive="1h")
    running = {m.model: m for m in client.ps().models}
    assert f"{DEMO_ID}:latest" in running and running[f"{DEMO_ID}:latest"].size > 0
    client.chat(model=DEMO_ID, messages=HELLO, options=SHORT, keep_alive=0)
    assert wait_for(lambda: f"{DEMO_ID}:latest" not in {m.model for m in client.ps().models})
    loaded = client.generate(model=DEMO_ID, prompt="")  # Ollama's way to load a model
    assert loaded.done_reason == "load"
    assert f"{DEMO_ID}:latest" in {m.model for m in client.ps().models}
    stopped = client.generate(model=DEMO_ID, prompt="", keep_alive=0)  # `ollama stop`
    assert stopped.done_reason == "unload"
    assert f"{DEMO_ID}:latest" not in {m.model for m in client.ps().models}


def wait_for(check, seconds: float = 10) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def test_pull_is_isolated(client: ollama.Client) -> None:
    assert client.pull(DEMO_ID).status == "success"  # the catalog has it
    with pytest.raises(ollama.ResponseError) as caught:
        client.pull("llama3.2:latest")
    assert caught.value.status_code == 501 and "pull is not available" in caught.value.error


@pytest.mark.parametrize(
    ("path", "body", "status", "says"),
    [
        ("chat", b"{not json", 400, "JSON"),
        ("chat", {"model": "no-such-model", "messages": HELLO}, 404, "no-such-model"),
        ("chat", {"messages": HELLO}, 400, "model"),
        (
            "generate",
            {"model": DEMO_ID, "prompt": "x", "options": {"temperature": "hot"}},
            400,
            "options.temperature",
        ),
        (
            "generate",
            {"model": DEMO_ID, "prompt": "x", "options": {"num_predict": "many"}},
            400,
            "options.num_predict",
        ),
        ("chat", {"model": DEMO_ID, "messages": HELLO, "format": "xml"}, 400, "format"),
        ("chat", {"model": DEMO_ID, "messages": HELLO, "keep_alive": "soon"}, 400, "keep_alive"),
        (
            "chat",
            {"model": DEMO_ID, "messages": [{"role": "robot", "content": "x"}]},
            400,
            "messages.0.role",
        ),
        ("embed", {"model": DEMO_ID, "input": "x"}, 400, "chat model"),
        ("show", {"model": "no-such-model"}, 404, "no-such-model"),
        ("nowhere", {}, 404, "Unknown endpoint"),
    ],
)
def test_errors_in_ollamas_shape(server, headers, path, body, status, says) -> None:
    kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
    response = httpx.post(f"{server.url}/api/{path}", headers=headers, timeout=60, **kwargs)
    assert response.status_code == status
    error = response.json()
    assert list(error) == ["error"] and says in error["error"]


def test_a_key_is_required(server: LiveServer) -> None:
    anonymous = ollama.Client(host=server.url)
    with pytest.raises(ollama.ResponseError) as caught:
        anonymous.list()
    assert caught.value.status_code == 401 and "API key" in caught.value.error
