"""POST /v1/rerank, /rerank and /v2/rerank over real HTTP on a live server with API keys
required, in Jina's and Cohere's (v1, v2) shapes, with small random-weight rerankers: BERT and
XLM-RoBERTa cross-encoders, scored against a plain numpy forward pass of the same checkpoint,
and a Qwen3 decoder reranker, scored against mlx-lm's own logits for "yes" and "no"."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.support.live_server import LiveServer, live_server
from tests.support.rerank_models import build_cross_encoder, build_decoder_reranker

pytestmark = pytest.mark.database_independent

QUERY = "where did the cat sit"
DOCUMENTS = [
    "the cat sat on the mat",
    "a quick brown fox jumps over the lazy dog and the dog was not amused at all " * 3,
    "hello world",
    "the dog sat",
]


@pytest.fixture(scope="module")
def folders(smollm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("rerankers")
    return {
        "bert-rerank": build_cross_encoder(root / "bert"),
        "xlmr-rerank": build_cross_encoder(root / "xlmr", roberta=True),
        "qwen-rerank": build_decoder_reranker(smollm_dir, root / "qwen"),
    }


@pytest.fixture(scope="module")
def server(
    folders: dict[str, Path], tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    setup = [
        ("add_model", name, "--local", str(path), "--rerank") for name, path in folders.items()
    ]
    setup.append(("add_model", "tiny", "--local", str(tiny_dir)))
    var = tmp_path_factory.mktemp("rerank")
    limits = {"MAX_REQUEST_PROMPT_TOKENS": "2000"}
    with live_server(var, *setup, REQUIRE_API_KEY="true", **limits) as live:
        yield live


@pytest.fixture(scope="module")
def http(server: LiveServer) -> Iterator[httpx.Client]:
    secret = server.manage("create_api_key", "reranker").stdout.strip()
    headers = {"Authorization": f"Bearer {secret}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=120) as client:
        yield client


def rerank(http: httpx.Client, path: str = "/v1/rerank", **body) -> dict:
    answer = http.post(path, json={"query": QUERY, "documents": DOCUMENTS, **body})
    assert answer.status_code == 200, answer.text
    return answer.json()


def scores_by_index(answer: dict) -> list[float]:
    found = {r["index"]: r["relevance_score"] for r in answer["results"]}
    return [found[i] for i in range(len(found))]


def test_jina_shape(http: httpx.Client) -> None:
    documents = [{"text": d} for d in DOCUMENTS]
    answer = rerank(http, model="bert-rerank", documents=documents)
    results = answer["results"]
    assert sorted(r["index"] for r in results) == list(range(len(DOCUMENTS)))
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True) and all(0 < s < 1 for s in scores)
    assert all(r["document"] == {"text": DOCUMENTS[r["index"]]} for r in results)
    assert answer["model"] == "bert-rerank" and answer["id"].startswith("rerank-")
    usage = answer["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] > 0


@pytest.mark.parametrize(
    ("path", "version"), [("/v1/rerank", "1"), ("/v2/rerank", "2"), ("/rerank", "1")]
)
def test_cohere_shape(http: httpx.Client, path: str, version: str) -> None:
    full = rerank(http, model="xlmr-rerank")
    answer = rerank(http, path, model="xlmr-rerank", top_n=2, return_documents=False)
    assert answer["results"] == [
        {k: r[k] for k in ("index", "relevance_score")} for r in full["results"][:2]
    ]
    assert answer["meta"]["api_version"]["version"] == version
    assert answer["meta"]["billed_units"]["search_units"] == 1
    many = rerank(http, path, model="xlmr-rerank", top_n=50, rank_fields=["text"])
    assert len(many["results"]) == len(DOCUMENTS)  # top_n past the documents: all of them


def reference_cross_encoder(
    folder: Path, query: str, documents: list[str], limit: int | None = None
) -> list[float]:
    """The sequence classifier's forward pass in numpy from its checkpoint, each pair alone,
    made by the tokenizer's own pair encoding (ids and segment ids; past `limit`, its own
    truncation of the document)."""
    import mlx.core as mx
    from tokenizers import Tokenizer

    config = json.loads((folder / "config.json").read_text())
    roberta = config["model_type"] != "bert"
    weights = {
        k: np.array(v, dtype=np.float64)
        for k, v in mx.load(str(folder / "model.safetensors")).items()
    }
    prefix = "roberta." if roberta else "bert."

    def w(name: str) -> np.ndarray:
        return weights[name if name.startswith("classifier") else prefix + name]

    def linear(x: np.ndarray, name: str) -> np.ndarray:
        return x @ w(f"{name}.weight").T + w(f"{name}.bias")

    def norm(x: np.ndarray, name: str) -> np.ndarray:
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        eps = config["layer_norm_eps"]
        return (x - mean) / np.sqrt(var + eps) * w(f"{name}.weight") + w(f"{name}.bias")

    gelu = np.vectorize(lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))))
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    if limit:
        tokenizer.enable_truncation(limit, strategy="only_second")
    heads = config["num_attention_heads"]
    scores = []
    for document in documents:
        pair = tokenizer.encode(query, document)
        ids, types = np.array(pair.ids), np.array(pair.type_ids)
        positions = np.arange(len(ids)) + (config["pad_token_id"] + 1 if roberta else 0)
        x = (
            w("embeddings.word_embeddings.weight")[ids]
            + w("embeddings.position_embeddings.weight")[positions]
        )
        x = norm(x + w("embeddings.token_type_embeddings.weight")[types], "embeddings.LayerNorm")
        for i in range(config["num_hidden_layers"]):
            layer = f"encoder.layer.{i}"
            q, k, v = (
                linear(x, f"{layer}.attention.self.{n}")
                .reshape(len(ids), heads, -1)
                .transpose(1, 0, 2)
                for n in ("query", "key", "value")
            )
            logits = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
            attention = np.exp(logits - logits.max(-1, keepdims=True))
            attention /= attention.sum(-1, keepdims=True)
            context = (attention @ v).transpose(1, 0, 2).reshape(len(ids), -1)
            x = norm(
                linear(context, f"{layer}.attention.output.dense") + x,
                f"{layer}.attention.output.LayerNorm",
            )
            inner = gelu(linear(x, f"{layer}.intermediate.dense"))
            x = norm(linear(inner, f"{layer}.output.dense") + x, f"{layer}.output.LayerNorm")
        if roberta:
            logit = linear(np.tanh(linear(x[0], "classifier.dense")), "classifier.out_proj")
        else:
            logit = linear(np.tanh(linear(x[0], "pooler.dense")), "classifier")
        scores.append(1 / (1 + math.exp(-logit[0])))
    return scores


@pytest.mark.parametrize("model", ["bert-rerank", "xlmr-rerank"])
def test_cross_encoder_matches_numpy(
    http: httpx.Client, folders: dict[str, Path], model: str
) -> None:
    """A padded batch of very different lengths scores each pair as the checkpoint does alone."""
    served = scores_by_index(rerank(http, model=model))
    expected = reference_cross_encoder(folders[model], QUERY, DOCUMENTS)
    np.testing.assert_allclose(served, expected, atol=2e-4)
    assert max(expected) - min(expected) > 1e-3  # the documents do score apart


MODEL_CARD_PREFIX = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and "
    'the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n'
    "<|im_start|>user\n"
)
MODEL_CARD_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def reference_decoder(
    folder: Path, query: str, documents: list[str], instruction: str
) -> list[float]:
    """Qwen3-Reranker's model card, through mlx-lm: P(yes) against P(no) at the last token."""
    import mlx.core as mx
    from mlx_lm import load

    model, tokenizer = load(str(folder))
    encode = tokenizer._tokenizer.encode
    yes, no = tokenizer.convert_tokens_to_ids("yes"), tokenizer.convert_tokens_to_ids("no")
    scores = []
    for document in documents:
        pair = f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}"
        ids = [
            *encode(MODEL_CARD_PREFIX, add_special_tokens=False),
            *encode(pair, add_special_tokens=False),
            *encode(MODEL_CARD_SUFFIX, add_special_tokens=False),
        ]
        logits = model(mx.array([ids]))[0, -1].astype(mx.float32)
        scores.append(float(mx.softmax(logits[mx.array([no, yes])])[1]))
    return scores


def test_decoder_matches_mlx_lm(http: httpx.Client, folders: dict[str, Path]) -> None:
    default = "Given a web search query, retrieve relevant passages that answer the query"
    served = scores_by_index(rerank(http, model="qwen-rerank"))
    expected = reference_decoder(folders["qwen-rerank"], QUERY, DOCUMENTS, default)
    np.testing.assert_allclose(served, expected, atol=2e-4)
    asked = "Find passages about animals"
    instructed = scores_by_index(rerank(http, model="qwen-rerank", instruction=asked))
    expected = reference_decoder(folders["qwen-rerank"], QUERY, DOCUMENTS, asked)
    np.testing.assert_allclose(instructed, expected, atol=2e-4)


def test_a_long_document_is_cut_to_the_model_s_limit(
    http: httpx.Client, folders: dict[str, Path]
) -> None:
    """The BERT reads 128 positions: what is left after the query is the document's start."""
    answer = rerank(http, model="bert-rerank", documents=[DOCUMENTS[1] * 3])
    assert answer["usage"]["total_tokens"] == 128
    expected = reference_cross_encoder(folders["bert-rerank"], QUERY, [DOCUMENTS[1] * 3], limit=128)
    np.testing.assert_allclose(scores_by_index(answer), expected, atol=2e-4)


def test_models_lists_the_capability(http: httpx.Client) -> None:
    card = http.get("/v1/models/qwen-rerank").json()
    assert card["capabilities"] == ["rerank"]


ERRORS = [
    # 20 pairs of 128 tokens: over MAX_REQUEST_PROMPT_TOKENS.
    (
        {"model": "bert-rerank", "query": QUERY, "documents": [DOCUMENTS[1] * 3] * 20},
        400,
        "documents",
    ),
    ({"model": "bert-rerank", "documents": DOCUMENTS}, 400, "query"),
    ({"model": "bert-rerank", "query": "", "documents": DOCUMENTS}, 400, "query"),
    ({"model": "bert-rerank", "query": QUERY, "documents": []}, 400, "documents"),
    ({"model": "bert-rerank", "query": QUERY}, 400, "documents"),
    ({"model": "bert-rerank", "query": QUERY, "documents": [{"title": "x"}]}, 400, "documents.0"),
    ({"model": "bert-rerank", "query": QUERY, "documents": DOCUMENTS, "top_n": 0}, 400, "top_n"),
    (
        {"model": "bert-rerank", "query": QUERY, "documents": DOCUMENTS, "top_n": "two"},
        400,
        "top_n",
    ),
    ({"model": "nope", "query": QUERY, "documents": DOCUMENTS}, 404, "model"),
    ({"model": "tiny", "query": QUERY, "documents": DOCUMENTS}, 400, "model"),
    (
        {"model": "bert-rerank", "query": "the quick brown fox " * 40, "documents": ["x"]},
        400,
        "query",
    ),
]


@pytest.mark.parametrize(("body", "status", "param"), ERRORS)
def test_errors(http: httpx.Client, body: dict, status: int, param: str) -> None:
    answer = http.post("/v1/rerank", json=body)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["param"] == param and error["message"] and error["type"], error


def test_a_chat_endpoint_refuses_a_reranker(http: httpx.Client) -> None:
    answer = http.post(
        "/v1/chat/completions",
        json={"model": "bert-rerank", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "model_not_supported"


def test_needs_a_key(server: LiveServer) -> None:
    answer = httpx.post(
        f"{server.url}/v1/rerank", json={"model": "bert-rerank", "query": "q", "documents": ["d"]}
    )
    assert answer.status_code == 401
