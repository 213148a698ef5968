"""POST /tokenize, /detokenize and /apply-template (and under /v1) over real HTTP on a live
server with API keys required: llama.cpp's and vLLM's request shapes, the chat form rendered
exactly as chat reads it (its prompt_tokens), and the errors in OpenAI's shape."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tokenizers import Tokenizer

from tests.support.live_server import LiveServer, live_server

pytestmark = pytest.mark.database_independent

TEXT = "This is a test string with unicode 媽 and emoji 🤗"
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def server(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    var = tmp_path_factory.mktemp("tokenize")
    tiny = ("add_model", "tiny", "--local", str(tiny_dir), "--max-output-tokens", "4")
    # Another copy as the default for unknown ids: llama.cpp's clients name no model.
    default = ("add_model", "default", "--local", str(tiny_dir), "--default-for-unknown-ids")
    with live_server(var, tiny, default, REQUIRE_API_KEY="true") as live:
        yield live


@pytest.fixture(scope="module")
def http(server: LiveServer) -> Iterator[httpx.Client]:
    secret = server.manage("create_api_key", "tokenizer").stdout.strip()
    headers = {"Authorization": f"Bearer {secret}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def narrow(server: LiveServer) -> Iterator[httpx.Client]:
    """A key for "tiny" alone: the default model is not its, so an unknown id is a 404."""
    secret = server.manage("create_api_key", "tiny-only", "--model", "tiny").stdout.strip()
    headers = {"Authorization": f"Bearer {secret}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def reference(tiny_dir: Path) -> Tokenizer:
    return Tokenizer.from_file(str(tiny_dir / "tokenizer.json"))


@pytest.mark.parametrize("root", ["", "/v1"])
def test_llama_cpp_shape(http: httpx.Client, reference: Tokenizer, root: str) -> None:
    answer = http.post(f"{root}/tokenize", json={"model": "tiny", "content": TEXT})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    expected = reference.encode(TEXT, add_special_tokens=False).ids
    assert body["tokens"] == expected
    assert body["count"] == len(expected) and body["max_model_len"] > 0
    back = http.post(f"{root}/detokenize", json={"model": "tiny", "tokens": expected}).json()
    assert back == {"content": TEXT, "prompt": TEXT}


def test_no_model_is_the_default_model(http: httpx.Client, reference: Tokenizer) -> None:
    answer = http.post("/tokenize", json={"content": "hello"}).json()
    assert answer["tokens"] == reference.encode("hello", add_special_tokens=False).ids
    assert http.post("/detokenize", json={"tokens": answer["tokens"]}).json()["content"] == "hello"


def test_pieces_hold_every_byte(http: httpx.Client) -> None:
    """A byte-level token holding part of a character comes back as its bytes (llama.cpp)."""
    body = {"model": "tiny", "content": TEXT, "with_pieces": True}
    pieces = http.post("/tokenize", json=body).json()["tokens"]
    raw = b"".join(
        p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"]) for p in pieces
    )
    assert raw.decode() == TEXT
    assert any(isinstance(p["piece"], list) for p in pieces)  # the emoji is split in bytes
    assert all(set(p) == {"id", "piece"} for p in pieces)


def test_vllm_shapes(http: httpx.Client, reference: Tokenizer) -> None:
    body = {"model": "tiny", "prompt": "hello world", "return_token_strs": True}
    answer = http.post("/v1/tokenize", json=body).json()
    assert answer["tokens"] == reference.encode("hello world", add_special_tokens=True).ids
    assert answer["token_strs"] == [reference.id_to_token(i) for i in answer["tokens"]]
    chat = http.post("/tokenize", json={"model": "tiny", "messages": CHAT}).json()
    assert "token_strs" not in chat
    rendered = http.post("/apply-template", json={"model": "tiny", "messages": CHAT}).json()
    assert chat["tokens"] == rendered["tokens"] and chat["count"] == rendered["count"]


def test_apply_template_is_what_chat_reads(http: httpx.Client, reference: Tokenizer) -> None:
    rendered = http.post("/v1/apply-template", json={"model": "tiny", "messages": CHAT}).json()
    assert "<|im_start|>user\nhello there<|im_end|>" in rendered["prompt"]
    assert rendered["prompt"].endswith("<|im_start|>assistant\n")
    assert reference.encode(rendered["prompt"], add_special_tokens=False).ids == rendered["tokens"]
    chat = http.post(
        "/v1/chat/completions", json={"model": "tiny", "messages": CHAT, "max_tokens": 1}
    ).json()
    assert chat["usage"]["prompt_tokens"] == rendered["count"] == len(rendered["tokens"])
    open_turn = {"model": "tiny", "messages": CHAT, "add_generation_prompt": False}
    closed = http.post("/apply-template", json=open_turn).json()
    assert not closed["prompt"].endswith("<|im_start|>assistant\n")
    assert rendered["tokens"][: closed["count"]] == closed["tokens"]


def test_tools_are_rendered(http: httpx.Client) -> None:
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}
    body = {"model": "tiny", "messages": CHAT, "tools": [tool]}
    assert "get_weather" in http.post("/apply-template", json=body).json()["prompt"]


ERRORS = [
    ("/tokenize", {"content": "x"}, 400, "model"),
    ("/tokenize", {"model": "nope", "content": "x"}, 404, "model"),
    ("/tokenize", {"model": "tiny"}, 400, "content"),
    ("/tokenize", {"model": "tiny", "content": "x", "prompt": "y"}, 400, "content"),
    ("/detokenize", {"model": "tiny", "tokens": [1, 10**9]}, 400, "tokens"),
    ("/detokenize", {"model": "tiny", "tokens": [-1]}, 400, "tokens"),
    ("/detokenize", {"model": "tiny", "tokens": "abc"}, 400, "tokens"),
    ("/apply-template", {"model": "tiny", "messages": []}, 400, "messages"),
    ("/apply-template", {"model": "nope", "messages": CHAT}, 404, "model"),
]


@pytest.mark.parametrize(("path", "body", "status", "param"), ERRORS)
def test_errors(narrow: httpx.Client, path: str, body: dict, status: int, param: str) -> None:
    answer = narrow.post(path, json=body)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["param"] == param and error["message"] and error["type"]


def test_needs_a_key(server: LiveServer) -> None:
    answer = httpx.post(f"{server.url}/tokenize", json={"model": "tiny", "content": "x"})
    assert answer.status_code == 401
    assert answer.json()["error"]["type"]
