"""Speculative decoding asked per request (`speculative`, every dialect) against a real uvicorn
server and the real SmolLM2, with the official SDKs: greedy answers are the same tokens with
and without n-gram drafts, streamed or not, and /metrics counts the drafts and their
acceptance. A bad `speculative` is a 400 in each dialect's shape. A model whose files ship an
MTP head (a Qwen3.5-shaped hybrid trained with one, tests/support/mtp_models.py) drafts with it by
default, beside the dense demo, and keeps most of its guesses."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.helpers import DEMO_ID
from tests.support.live_server import LiveServer, demo_server

# Drafting happens in the engine; the catalog rows it reads are the same on either database.
pytestmark = pytest.mark.database_independent

# An answer that repeats its prompt, as a code edit does: what prompt lookup drafts.
SOURCE = "\n".join(
    f"def total_{i}(items):\n    return sum(item.price * item.count for item in items)\n"
    for i in range(6)
)
EDIT = [
    {
        "role": "user",
        "content": f"Copy this code exactly, with no other text:\n\n{SOURCE}",
    }
]
GREEDY = {"temperature": 0, "max_tokens": 96}


@pytest.fixture(scope="module")
def server(demo_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with demo_server(demo_gguf, tmp_path_factory.mktemp("speculative-var")) as server:
        yield server


@pytest.fixture(scope="module")
def api_key(server: LiveServer) -> str:
    return server.manage("create_api_key", "speculative").stdout.strip()


@pytest.fixture(scope="module")
def client(server: LiveServer, api_key: str) -> openai.OpenAI:
    return server.openai(api_key)


def drafts(server: LiveServer, model: str = DEMO_ID) -> dict[str, float]:
    """The model's speculation metrics (those it has: the rate only once it drafted)."""
    text = httpx.get(f"{server.url}/metrics", headers=server.admin_headers, timeout=10).text
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith(("inference_draft", "inference_verify"))
        and sample.labels.get("model") == model
    }


def chat(client: openai.OpenAI, speculative) -> openai.types.chat.ChatCompletion:
    extra = {} if speculative is None else {"speculative": speculative}
    return client.chat.completions.create(model=DEMO_ID, messages=EDIT, **GREEDY, extra_body=extra)


def test_greedy_chat_is_the_same_with_drafts_and_metrics_count_them(server, client):
    chat(client, "off")  # loads the model
    before = drafts(server)
    plain = chat(client, "off")
    assert drafts(server) == before  # "off": no draft verified
    drafted = chat(client, "ngram")
    assert drafted.choices[0].message.content == plain.choices[0].message.content
    assert drafted.usage.completion_tokens == plain.usage.completion_tokens
    assert drafted.choices[0].finish_reason == plain.choices[0].finish_reason
    after = drafts(server)
    verified = after["inference_draft_tokens_total"] - before["inference_draft_tokens_total"]
    kept = (
        after["inference_draft_tokens_accepted_total"]
        - before["inference_draft_tokens_accepted_total"]
    )
    assert verified > 0 and 0 < kept <= verified  # the copy accepts drafts
    rate = after["inference_draft_acceptance_rate"]
    assert rate == pytest.approx(
        after["inference_draft_tokens_accepted_total"] / after["inference_draft_tokens_total"]
    )
    pool = httpx.get(f"{server.url}/control/pool", headers=server.admin_headers, timeout=10)
    model = next(m for m in pool.json()["models"] if m["id"] == DEMO_ID)
    assert model["draft_tokens"] == after["inference_draft_tokens_total"]
    assert model["verify_steps"] == after["inference_verify_steps_total"] > 0
    # A plain K/V model drops rejected positions: it never replays (engine/rewind.py).
    assert model["replayed_steps"] == after["inference_verify_replays_total"] == 0


def test_streamed_tokens_are_the_same_with_drafts(client):
    """Several tokens produced in one step reach the stream as the plain step's would."""
    plain = chat(client, None)
    stream = client.chat.completions.create(
        model=DEMO_ID,
        messages=EDIT,
        **GREEDY,
        stream=True,
        stream_options={"include_usage": True},
        logprobs=True,
        extra_body={"speculative": {"method": "ngram", "num_speculative_tokens": 8}},
    )
    text, logprobs, usage = "", [], None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            logprobs += [t.token for t in (choice.logprobs.content if choice.logprobs else [])]
    assert text == plain.choices[0].message.content
    assert usage.completion_tokens == plain.usage.completion_tokens == len(logprobs)


def test_messages_and_responses_take_the_option(server, client, api_key):
    plain = chat(client, "off").choices[0].message.content
    claude = server.anthropic(api_key)
    message = claude.messages.create(
        model=DEMO_ID,
        messages=EDIT,
        max_tokens=96,
        extra_body={"temperature": 0, "speculative": "ngram"},
    )
    assert "".join(b.text for b in message.content if b.type == "text") == plain
    response = client.responses.create(
        model=DEMO_ID,
        input=EDIT,
        max_output_tokens=96,
        temperature=0,
        store=False,
        extra_body={"speculative": "ngram"},
    )
    assert response.output_text == plain


@pytest.mark.parametrize(
    "value",
    [
        "medusa",
        "draft_model",  # the demo model has no draft model in the catalog
        "mtp",  # nor an MTP head in its files
        {"method": "ngram", "num_speculative_tokens": 0},
        {"method": "ngram", "num_speculative_tokens": 17},
        {"num_speculative_tokens": 4},
        7,
    ],
)
@pytest.mark.parametrize(
    ("path", "body", "error_type"),
    [
        ("/v1/chat/completions", {"messages": EDIT, "max_tokens": 4}, "invalid_request_error"),
        ("/v1/completions", {"prompt": "def", "max_tokens": 4}, "invalid_request_error"),
        ("/v1/messages", {"messages": EDIT, "max_tokens": 4}, "invalid_request_error"),
        ("/v1/responses", {"input": "def", "max_output_tokens": 4}, "invalid_request_error"),
    ],
)
def test_a_bad_speculative_is_a_400_in_the_dialect(server, api_key, path, body, error_type, value):
    response = httpx.post(
        f"{server.url}{path}",
        json={"model": DEMO_ID, **body, "speculative": value},
        headers={"Authorization": f"Bearer {api_key}"},
        timeout=30,
    )
    assert response.status_code == 400, response.text
    document = response.json()
    if path == "/v1/messages":
        assert document["type"] == "error"
        assert document["error"]["type"] == error_type
        assert "speculative" in document["error"]["message"]
    else:
        assert document["error"]["type"] == error_type
        assert document["error"]["param"].startswith("speculative")


def test_the_catalog_default_applies_when_a_request_does_not_say(server, client, smollm_dir):
    drafting = ("--speculative", "ngram")
    server.manage("add_model", "demo-drafting", "--local", str(smollm_dir), *drafting)
    body = {"model": "demo-drafting", "messages": EDIT, **GREEDY}
    client.chat.completions.create(**body)  # loads it

    def verified() -> float:
        return drafts(server, "demo-drafting")["inference_draft_tokens_total"]

    before = verified()
    assert before > 0  # the first request drafted too
    answer = client.chat.completions.create(**body).choices[0].message.content
    assert verified() > before
    after = verified()
    off = client.chat.completions.create(**body, extra_body={"speculative": "off"})
    assert verified() == after  # the request's "off" wins over the catalog
    assert off.choices[0].message.content == answer


def test_a_catalog_draft_model_drafts_and_keeps_the_answer(server, client, smollm_dir):
    """A model whose catalog row names a draft model (here another row of the same weights,
    so its guesses are right) answers as the model alone does, in fewer steps."""
    server.manage("add_model", "demo-draft", "--local", str(smollm_dir))
    drafted = ("--draft-model", "demo-draft", "--speculative", "draft_model")
    server.manage("add_model", "demo-drafted", "--local", str(smollm_dir), *drafted)
    plain = chat(client, "off").choices[0].message.content
    body = {"model": "demo-drafted", "messages": EDIT, **GREEDY}
    answer = client.chat.completions.create(**body)
    assert answer.choices[0].message.content == plain
    counts = drafts(server, "demo-drafted")
    verified = counts["inference_draft_tokens_total"]
    assert verified > 20
    assert counts["inference_draft_tokens_accepted_total"] >= 0.9 * verified
    pool = httpx.get(f"{server.url}/control/pool", headers=server.admin_headers, timeout=10)
    loaded = {m["id"] for m in pool.json()["models"]}
    assert "demo-drafted" in loaded and "demo-draft" not in loaded  # read with its model


@pytest.fixture(scope="module")
def hybrid(server: LiveServer, smollm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The demo grafted into Granite 4's hybrid layout (tests/support/grafted.py): Mamba-2 layers,
    whose state cannot drop a rejected draft's positions, answering as the demo nearly does."""
    from tests.support.grafted import grafted

    folder = grafted(smollm_dir, tmp_path_factory.mktemp("grafted") / "demo-hybrid")
    server.manage("add_model", "demo-hybrid", "--local", str(folder))
    return "demo-hybrid"


def test_a_hybrid_model_drafts_and_replays_with_the_same_answers(server, client, hybrid):
    """A model with recurrent state drafts the copy for real: its answer is its plain one,
    most drafts are kept, and the steps that rejected some were replayed."""
    plain = answer(client, hybrid, "off")
    before = drafts(server, hybrid)
    assert answer(client, hybrid, "ngram") == plain
    after = drafts(server, hybrid)

    def grew(name: str) -> float:
        return after[name] - before.get(name, 0)

    verified, kept = (
        grew("inference_draft_tokens_total"),
        grew("inference_draft_tokens_accepted_total"),
    )
    assert verified > 0 and kept > verified / 2
    assert grew("inference_verify_steps_total") > 0
    assert (grew("inference_verify_replays_total") > 0) == (kept < verified)
    health = httpx.get(f"{server.url}/health", headers=server.admin_headers, timeout=10).json()
    speculation = health["models"][hybrid]["speculation"]
    assert speculation["replayed_steps"] == after["inference_verify_replays_total"]
    assert speculation["accepted_draft_tokens"] == after["inference_draft_tokens_accepted_total"]


def test_a_hybrid_model_beside_a_dense_one_gives_every_row_its_plain_answer(client, hybrid):
    """Requests to the hybrid and to the dense demo at once, drafting and not: one batch per
    model, each row's answer its plain one."""
    plain = {model: answer(client, model, "off") for model in (hybrid, DEMO_ID)}
    asks = [(hybrid, "ngram"), (DEMO_ID, "ngram"), (hybrid, "off"), (hybrid, "ngram")]
    with concurrent.futures.ThreadPoolExecutor(len(asks)) as pool:
        answers = list(pool.map(lambda ask: answer(client, *ask), asks))
    assert answers == [plain[model] for model, _ in asks]


def answer(client: openai.OpenAI, model: str, speculative: str) -> str:
    response = client.chat.completions.create(
        model=model, messages=EDIT, **GREEDY, extra_body={"speculative": speculative}
    )
    return response.choices[0].message.content


@pytest.fixture(scope="module")
def mtp_model(server: LiveServer, smollm_dir: Path) -> str:
    """The trained MTP hybrid, added with no --speculative: its head makes mtp its default."""
    from tests.support.mtp_models import trained_once

    server.manage("add_model", "mtp-hybrid", "--local", str(trained_once(smollm_dir)))
    return "mtp-hybrid"


def completion(client: openai.OpenAI, model: str, prompt: list[int], **extra) -> str:
    response = client.completions.create(
        model=model, prompt=prompt, temperature=0, max_tokens=40, extra_body=extra
    )
    return response.choices[0].text


def drafter_counts(server: LiveServer, model: str, drafter: str) -> tuple[float, float]:
    text = httpx.get(f"{server.url}/metrics", headers=server.admin_headers, timeout=10).text
    counts = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("inference_drafter_tokens")
        and sample.labels == {"model": model, "drafter": drafter}
    }
    return (
        counts.get("inference_drafter_tokens_total", 0.0),
        counts.get("inference_drafter_tokens_accepted_total", 0.0),
    )


def test_a_model_with_an_mtp_head_drafts_with_it_by_default(server, client, mtp_model):
    """Its catalog default is mtp; the answer is its plain one, in fewer steps than tokens,
    and /metrics, /health and /control/pool say what its head drafted and kept."""
    from tests.support.mtp_models import cycle_prompt

    prompt = cycle_prompt(4, 12)
    plain = completion(client, mtp_model, prompt, speculative="off")
    before = drafter_counts(server, mtp_model, "mtp")
    steps_before = drafts(server, mtp_model).get("inference_verify_steps_total", 0)
    assert completion(client, mtp_model, prompt) == plain
    fed, kept = (
        a - b for a, b in zip(drafter_counts(server, mtp_model, "mtp"), before, strict=True)
    )
    steps = drafts(server, mtp_model)["inference_verify_steps_total"] - steps_before
    assert kept >= 0.8 * fed > 0
    assert 40 / steps > 1.4
    health = httpx.get(f"{server.url}/health", headers=server.admin_headers, timeout=10).json()
    speculation = health["models"][mtp_model]["speculation"]
    assert speculation["drafters"]["mtp"]["accepted_draft_tokens"] >= kept
    assert "MTP head" in speculation["mtp"]
    pool = httpx.get(f"{server.url}/control/pool", headers=server.admin_headers, timeout=10)
    model = next(m for m in pool.json()["models"] if m["id"] == mtp_model)
    assert model["mtp_heads"] and "mtp" in model["drafters"]


def test_mtp_ngram_and_plain_rows_beside_a_dense_model_keep_their_answers(client, mtp_model):
    """The MTP hybrid's rows (mtp, n-gram, off) and the dense demo's (n-gram, off) at once:
    every answer is its plain one."""
    from tests.support.mtp_models import cycle_prompt

    prompts = {"a": cycle_prompt(0, 10), "b": cycle_prompt(30, 64) + cycle_prompt(30, 8)}
    plain = {
        key: completion(client, mtp_model, ids, speculative="off") for key, ids in prompts.items()
    }
    dense = answer(client, DEMO_ID, "off")
    asks = [("a", "mtp"), ("b", "ngram"), ("a", "off"), ("b", "mtp"), ("dense", "ngram")]

    def ask(pair: tuple[str, str]) -> str:
        key, speculative = pair
        if key == "dense":
            return answer(client, DEMO_ID, speculative)
        return completion(client, mtp_model, prompts[key], speculative=speculative)

    with concurrent.futures.ThreadPoolExecutor(len(asks)) as pool:
        answers = list(pool.map(ask, asks))
    assert answers == [dense if key == "dense" else plain[key] for key, _ in asks]
