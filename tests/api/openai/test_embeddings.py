"""POST /v1/embeddings over HTTP with the official openai SDK, on a real uvicorn server with
small random-weight embedding models: a Qwen3 decoder (last-token pooling, SmolLM2's tokenizer)
and a BERT encoder (mean pooling, masked). No generation is mocked."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from tests.support.live_server import LiveServer, live_server

# Its servers have their own databases and store nothing a request says: the PostgreSQL pass
# would only repeat it (tests/conftest.py).
pytestmark = pytest.mark.database_independent

DECODER, ENCODER = "qwen3-embed", "bert-embed"
RAW, SHORT, CUT = "bert-raw", "bert-short", "bert-cut"
LONG = "the quick brown fox jumps over the lazy dog and the cat sat on the mat " * 6
TEXTS = ["hello", LONG, "a dog", "search the world for a good model " * 3, "cat"]
MAX_INPUTS = 16
MAX_PROMPT_TOKENS = 2000


@pytest.fixture(scope="module")
def server(
    tiny_dir: Path,
    decoder_embedder_dir: Path,
    encoder_embedder_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LiveServer]:
    bert = ("--local", str(encoder_embedder_dir), "--embedding")
    setup = [
        ("add_model", "tiny", "--local", str(tiny_dir), "--max-output-tokens", "8"),
        ("add_model", DECODER, "--local", str(decoder_embedder_dir), "--embedding"),
        ("add_model", ENCODER, *bert, "--query-prefix", "search query: "),
        ("add_model", RAW, *bert, "--no-normalize"),
        ("add_model", SHORT, *bert, "--max-input-tokens", "8"),
        ("add_model", CUT, *bert, "--max-input-tokens", "8", "--truncate"),
    ]
    var = tmp_path_factory.mktemp("embeddings")
    limits = {
        "EMBEDDINGS_MAX_INPUTS": str(MAX_INPUTS),
        "MAX_REQUEST_PROMPT_TOKENS": str(MAX_PROMPT_TOKENS),
    }
    with live_server(var, *setup, **limits) as live:
        yield live


@pytest.fixture(scope="module")
def client(server: LiveServer) -> openai.OpenAI:
    return server.openai(timeout=60)


def vectors(client: openai.OpenAI, model: str, inputs, **kwargs) -> np.ndarray:
    answer = client.embeddings.create(model=model, input=inputs, **kwargs)
    assert [d.index for d in answer.data] == list(range(len(answer.data)))
    return np.array([d.embedding for d in answer.data], dtype=np.float32)


@pytest.mark.parametrize("model", [DECODER, ENCODER])
def test_batch_equals_one_by_one(client: openai.OpenAI, model: str) -> None:
    """Inputs of very different lengths in one padded batch embed as they do alone."""
    batched = vectors(client, model, TEXTS)
    alone = np.concatenate([vectors(client, model, text) for text in TEXTS])
    assert batched.shape == (len(TEXTS), 64 if model == DECODER else 48)
    np.testing.assert_allclose(batched, alone, atol=1e-4)
    assert not np.allclose(batched[0], batched[2], atol=1e-3)  # different texts differ


@pytest.mark.parametrize("model", [DECODER, ENCODER])
def test_normalized_and_token_ids(
    client: openai.OpenAI, model: str, decoder_embedder_dir: Path, encoder_embedder_dir: Path
) -> None:
    text = vectors(client, model, "a quick brown fox")
    np.testing.assert_allclose(np.linalg.norm(text, axis=1), 1.0, atol=1e-5)
    folder = decoder_embedder_dir if model == DECODER else encoder_embedder_dir
    ids = tokenize(folder, "a quick brown fox")
    np.testing.assert_allclose(vectors(client, model, [ids]), text, atol=1e-4)
    np.testing.assert_allclose(vectors(client, model, ids), text, atol=1e-4)


def tokenize(folder: Path, text: str) -> list[int]:
    """The text's ids without special tokens, as a client's tokenizer would give them."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
    return tokenizer.encode(text, add_special_tokens=False).ids


def test_not_normalized_when_off(client: openai.OpenAI) -> None:
    raw = vectors(client, RAW, ["hello world", "cat"])
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0, atol=1e-3)
    unit = vectors(client, ENCODER, ["hello world", "cat"])
    np.testing.assert_allclose(raw / np.linalg.norm(raw, axis=1, keepdims=True), unit, atol=1e-4)


def test_base64_decodes_to_the_floats(client: openai.OpenAI) -> None:
    floats = vectors(client, ENCODER, TEXTS[:3])
    answer = client.embeddings.create(model=ENCODER, input=TEXTS[:3], encoding_format="base64")
    for row, item in zip(floats, answer.data, strict=True):
        assert isinstance(item.embedding, str)
        decoded = np.frombuffer(base64.b64decode(item.embedding), dtype="<f4")
        np.testing.assert_array_equal(decoded, row)


@pytest.mark.parametrize("model", [DECODER, ENCODER])
def test_dimensions_truncate_and_renormalize(client: openai.OpenAI, model: str) -> None:
    full = vectors(client, model, TEXTS[:2])
    short = vectors(client, model, TEXTS[:2], dimensions=16)
    assert short.shape == (2, 16)
    expected = full[:, :16] / np.linalg.norm(full[:, :16], axis=1, keepdims=True)
    np.testing.assert_allclose(short, expected, atol=1e-5)


def test_usage_counts_tokens_with_specials(
    client: openai.OpenAI, encoder_embedder_dir: Path
) -> None:
    answer = client.embeddings.create(model=ENCODER, input=["hello world", "cat"])
    ids = [tokenize(encoder_embedder_dir, t) for t in ("hello world", "cat")]
    expected = sum(len(i) + 2 for i in ids)  # [CLS] ... [SEP]
    assert answer.usage.prompt_tokens == answer.usage.total_tokens == expected
    assert answer.model == ENCODER and answer.object == "list"


def test_input_type_applies_the_catalog_prefix(client: openai.OpenAI) -> None:
    plain = vectors(client, ENCODER, "hello world")
    as_query = vectors(client, ENCODER, "hello world", extra_body={"input_type": "query"})
    prefixed = vectors(client, ENCODER, "search query: hello world")
    np.testing.assert_allclose(as_query, prefixed, atol=1e-5)
    assert not np.allclose(as_query, plain, atol=1e-3)
    # No document prefix in this entry: the text as it is.
    as_document = vectors(client, ENCODER, "hello world", extra_body={"input_type": "document"})
    np.testing.assert_allclose(as_document, plain, atol=1e-5)


def test_truncation_when_the_entry_says_so(client: openai.OpenAI) -> None:
    cut = vectors(client, CUT, LONG)
    answer = client.embeddings.create(model=CUT, input=LONG)
    assert answer.usage.prompt_tokens == 8
    assert np.isfinite(cut).all()


def test_models_list_capabilities(client: openai.OpenAI) -> None:
    cards = {m.id: m for m in client.models.list()}
    assert cards[ENCODER].model_extra["capabilities"] == ["embedding"]
    assert cards[DECODER].model_extra["capabilities"] == ["embedding"]
    assert cards["tiny"].model_extra["capabilities"] == ["completion"]


WORDS = "cat dog"
BAD = [
    # (id, path, body, status, param, code, words in the message)
    ("empty list", "embeddings", {"input": []}, 400, "input", None, "empty"),
    ("empty string", "embeddings", {"input": ""}, 400, "input", None, "empty"),
    ("empty string in list", "embeddings", {"input": ["a", ""]}, 400, "input", None, "input[1]"),
    ("empty token list", "embeddings", {"input": [[1, 2], []]}, 400, "input", None, "input[1]"),
    ("mixed types", "embeddings", {"input": ["a", 3]}, 400, "input", None, "input"),
    ("nested too deep", "embeddings", {"input": [[[1]]]}, 400, "input", None, "input"),
    ("object input", "embeddings", {"input": {"a": 1}}, 400, "input", None, "input"),
    ("id out of vocab", "embeddings", {"input": [5, 10**6]}, 400, "input", None, "1000000"),
    ("negative id", "embeddings", {"input": [[3], [-1]]}, 400, "input", None, "input[1]"),
    ("dimensions 0", "embeddings", {"input": WORDS, "dimensions": 0}, 400, "dimensions", None, ""),
    (
        "dimensions too big",
        "embeddings",
        {"input": WORDS, "dimensions": 49},
        400,
        "dimensions",
        "invalid_value",
        "48",
    ),
    (
        "bad encoding",
        "embeddings",
        {"input": WORDS, "encoding_format": "int8"},
        400,
        "encoding_format",
        None,
        "",
    ),
    (
        "input_type",
        "embeddings",
        {"input": WORDS, "input_type": "passage"},
        400,
        "input_type",
        None,
        "",
    ),
    (
        "too many inputs",
        "embeddings",
        {"input": ["cat"] * (MAX_INPUTS + 1)},
        400,
        "input",
        "too_many_inputs",
        "EMBEDDINGS_MAX_INPUTS",
    ),
    (
        "input too long",
        "embeddings",
        {"model": SHORT, "input": ["cat", LONG]},
        400,
        "input",
        "context_length_exceeded",
        "input[1]",
    ),
    (
        "chat model",
        "embeddings",
        {"model": "tiny", "input": WORDS},
        400,
        "model",
        "model_not_supported",
        "chat model",
    ),
    (
        "embedding model for chat",
        "chat/completions",
        {"messages": [{"role": "user", "content": "hi"}]},
        400,
        "model",
        "model_not_supported",
        "embedding model",
    ),
    (
        "embedding model for completions",
        "completions",
        {"prompt": "hi"},
        400,
        "model",
        "model_not_supported",
        "embedding model",
    ),
    (
        "embedding model for responses",
        "responses",
        {"input": "hi"},
        400,
        "model",
        "model_not_supported",
        "embedding model",
    ),
    (
        "unknown model",
        "embeddings",
        {"model": "nope", "input": WORDS},
        404,
        "model",
        "model_not_found",
        "nope",
    ),
    ("missing model", "embeddings", {"model": None, "input": WORDS}, 400, "model", None, ""),
    ("missing input", "embeddings", {"input": None}, 400, "input", None, ""),
    (
        "too many tokens in all",
        "embeddings",
        {"model": DECODER, "input": [[5] * 500] * 5},
        400,
        "input",
        "too_many_prompt_tokens",
        f"at most {MAX_PROMPT_TOKENS}",
    ),
]


@pytest.mark.parametrize(
    ("path", "body", "status", "param", "code", "words"),
    [row[1:] for row in BAD],
    ids=[row[0] for row in BAD],
)
def test_malformed_requests(
    server: LiveServer,
    path: str,
    body: dict,
    status: int,
    param: str,
    code: str | None,
    words: str,
) -> None:
    body = {"model": ENCODER, **body}
    body = {key: value for key, value in body.items() if value is not None}
    answer = httpx.post(f"{server.api}/{path}", json=body, timeout=30)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["param"] == param, error
    assert error["type"] == "invalid_request_error", error
    if code is not None:
        assert error["code"] == code, error
    assert words in error["message"], error


def test_request_too_large(server: LiveServer) -> None:
    body = {"model": ENCODER, "input": ["cat " * 1000] * 5000}
    answer = httpx.post(f"{server.api}/embeddings", json=body, timeout=30)
    assert answer.status_code == 413, answer.text


def test_null_means_the_default(server: LiveServer) -> None:
    """LiteLLM sends every optional field, unset ones as null: `encoding_format: null` is
    float vectors, as OpenAI reads it."""
    body = {"model": ENCODER, "input": ["cat"], "encoding_format": None, "dimensions": None}
    answer = httpx.post(f"{server.api}/embeddings", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    (entry,) = answer.json()["data"]
    assert isinstance(entry["embedding"], list) and len(entry["embedding"]) > 8
