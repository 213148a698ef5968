"""Anthropic's Message Batches through the official anthropic SDK on a live server: a batch of
Messages requests answered as POST /v1/messages answers them (greedy), a bad request refused
up front in Anthropic's error body, a line refused by serving in the results as errored, the
list, cancel, results and delete, and another key seeing nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest

from tests.support.live_server import LiveServer, live_server

pytestmark = pytest.mark.database_independent

CHAT = "tiny"


@pytest.fixture(scope="module")
def server(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    setup = [("add_model", CHAT, "--local", str(tiny_dir), "--max-output-tokens", "8")]
    var = tmp_path_factory.mktemp("message-batches")
    with live_server(var, *setup, REQUIRE_API_KEY="true", BATCH_CONCURRENCY="2") as live:
        yield live


@pytest.fixture(scope="module")
def keys(server: LiveServer) -> list[str]:
    return [server.manage("create_api_key", name).stdout.strip() for name in ("a", "b")]


@pytest.fixture(scope="module")
def alice(server: LiveServer, keys) -> anthropic.Anthropic:
    return server.anthropic(keys[0])


def ask(text: str, **more) -> dict:
    return {
        "model": CHAT,
        "max_tokens": 8,
        "temperature": 0,
        "messages": [{"role": "user", "content": text}],
        **more,
    }


def call(client: anthropic.Anthropic, params: dict):
    """POST /v1/messages with these params (this SDK takes temperature only as extra body)."""
    named = {key: value for key, value in params.items() if key != "temperature"}
    return client.messages.create(**named, extra_body={"temperature": params["temperature"]})


def ended(client: anthropic.Anthropic, batch_id: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = client.messages.batches.retrieve(batch_id)
        if batch.processing_status == "ended":
            return batch
        time.sleep(0.1)
    pytest.fail(f"{batch_id} still {batch.processing_status}")


def test_a_batch_answers_as_messages_does(alice):
    requests = [{"custom_id": f"m{i}", "params": ask(f"Count to {i}.")} for i in range(2)]
    # Valid as a Messages request, refused by serving: a model the catalog lacks.
    requests.append({"custom_id": "big", "params": ask("Hi.", model="no-such-model")})
    made = alice.messages.batches.create(requests=requests)
    assert made.type == "message_batch" and made.id.startswith("msgbatch_")
    assert made.processing_status == "in_progress" and made.results_url is None
    batch = ended(alice, made.id)
    counts = batch.request_counts
    assert (counts.succeeded, counts.errored, counts.processing) == (2, 1, 0)
    assert batch.ended_at is not None and batch.results_url.endswith(f"{made.id}/results")
    results = {r.custom_id: r.result for r in alice.messages.batches.results(made.id)}
    assert list(results) == ["m0", "m1", "big"]
    for i in range(2):
        assert results[f"m{i}"].type == "succeeded"
        direct = call(alice, ask(f"Count to {i}."))
        assert results[f"m{i}"].message.content[0].text == direct.content[0].text
    errored = results["big"]
    assert errored.type == "errored" and errored.error.type == "error"
    with pytest.raises(anthropic.NotFoundError) as direct_error:
        call(alice, ask("Hi.", model="no-such-model"))
    assert errored.error.error.type == "not_found_error"
    assert errored.error.error.message == direct_error.value.body["error"]["message"]
    assert made.id in [b.id for b in alice.messages.batches.list()]
    deleted = alice.messages.batches.delete(made.id)
    assert (deleted.id, deleted.type) == (made.id, "message_batch_deleted")
    with pytest.raises(anthropic.NotFoundError):
        alice.messages.batches.retrieve(made.id)


def test_bad_requests_are_refused_up_front(alice):
    with pytest.raises(anthropic.BadRequestError) as missing:
        alice.messages.batches.create(
            requests=[{"custom_id": "a", "params": {"model": CHAT, "messages": []}}]  # type: ignore[typeddict-item]
        )
    assert missing.value.body["type"] == "error"
    assert "requests.0.params" in missing.value.body["error"]["message"]
    twice = [{"custom_id": "a", "params": ask("x")}] * 2
    with pytest.raises(anthropic.BadRequestError) as duplicate:
        alice.messages.batches.create(requests=twice)
    assert "Duplicate custom_id" in duplicate.value.body["error"]["message"]


def test_cancel_and_another_key(server: LiveServer, keys, alice):
    requests = [{"custom_id": f"n{i}", "params": ask("Say something.")} for i in range(40)]
    made = alice.messages.batches.create(requests=requests)
    canceling = alice.messages.batches.cancel(made.id)
    assert canceling.processing_status in ("canceling", "ended")
    assert canceling.cancel_initiated_at is not None
    batch = ended(alice, made.id)
    assert batch.request_counts.canceled > 0
    kinds = {r.result.type for r in alice.messages.batches.results(made.id)}
    assert "canceled" in kinds and kinds <= {"succeeded", "canceled"}
    bob = server.anthropic(keys[1])
    with pytest.raises(anthropic.NotFoundError) as missing:
        bob.messages.batches.retrieve(made.id)
    assert missing.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.NotFoundError):
        bob.messages.batches.cancel(made.id)
    assert list(bob.messages.batches.list()) == []
