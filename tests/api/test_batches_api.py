"""OpenAI's Batch API through the official openai SDK on a live server: batches of chat,
completions, embeddings and Responses lines run through the same serving code as the endpoints
(a line's answer equals the endpoint's own, greedy), a bad line in the error file, the input
checked up front in OpenAI's words, a key's model list applied to its lines, another key seeing
nothing, a cancel, and a restart mid-batch that runs no line twice."""

from __future__ import annotations

import io
import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.support.live_server import ROOT, LiveServer, free_port, live_server

# Its server has its own SQLite database, read directly for the lines' attempt counts.
pytestmark = pytest.mark.database_independent

CHAT, EMBED = "tiny", "bert-embed"
SAY = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def server(
    tiny_dir: Path, encoder_embedder_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    setup = [
        ("add_model", CHAT, "--local", str(tiny_dir), "--max-output-tokens", "8"),
        ("add_model", EMBED, "--local", str(encoder_embedder_dir), "--embedding"),
    ]
    var = tmp_path_factory.mktemp("batches")
    with live_server(var, *setup, REQUIRE_API_KEY="true", BATCH_CONCURRENCY="2") as live:
        yield live


@pytest.fixture(scope="module")
def keys(server: LiveServer) -> dict[str, str]:
    made = {name: server.manage("create_api_key", name).stdout.strip() for name in ("a", "b")}
    made["only-chat"] = server.manage("create_api_key", "only-chat", "--model", CHAT).stdout.strip()
    return made


@pytest.fixture(scope="module")
def alice(server: LiveServer, keys) -> openai.OpenAI:
    return server.openai(keys["a"])


def line(custom_id: str, url: str, body: dict) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


def upload(client: openai.OpenAI, lines: list, raw: bytes = b"") -> str:
    text = raw or "".join(json.dumps(item) + "\n" for item in lines).encode()
    return client.files.create(file=("in.jsonl", io.BytesIO(text)), purpose="batch").id


def run_batch(client: openai.OpenAI, endpoint: str, lines: list) -> openai.types.Batch:
    made = client.batches.create(
        input_file_id=upload(client, lines), endpoint=endpoint, completion_window="24h"
    )
    assert made.status == "validating" and made.object == "batch"
    return wait(client, made.id, ("completed", "failed", "cancelled", "expired"))


def wait(client: openai.OpenAI, batch_id: str, statuses, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = client.batches.retrieve(batch_id)
        if batch.status in statuses:
            return batch
        time.sleep(0.1)
    pytest.fail(f"batch {batch_id} still {batch.status} after {timeout} s")


def output(client: openai.OpenAI, file_id: str | None) -> dict[str, dict]:
    assert file_id is not None
    rows = [json.loads(x) for x in client.files.content(file_id).text.splitlines()]
    by_id = {row["custom_id"]: row for row in rows}
    assert len(by_id) == len(rows)  # each line once
    return by_id


def test_a_chat_batch_answers_as_the_endpoint_does(alice):
    asks = [
        line(
            f"chat-{i}",
            "/v1/chat/completions",
            {
                "model": CHAT,
                "messages": [{"role": "user", "content": f"Count to {i}."}],
                "max_tokens": 8,
                "temperature": 0,
                "stream": True,
            },
        )
        for i in range(3)
    ]
    asks.append(line("bad", "/v1/chat/completions", {"model": CHAT, "messages": "nope"}))
    batch = run_batch(alice, "/v1/chat/completions", asks)
    assert batch.status == "completed"
    counts = batch.request_counts
    assert (counts.total, counts.completed, counts.failed) == (4, 3, 1)
    assert batch.in_progress_at and batch.finalizing_at and batch.completed_at
    done = output(alice, batch.output_file_id)
    assert sorted(done) == ["chat-0", "chat-1", "chat-2"]
    for i in range(3):
        row = done[f"chat-{i}"]
        assert row["id"].startswith("batch_req_") and row["error"] is None
        assert row["response"]["status_code"] == 200
        body = row["response"]["body"]
        assert body["object"] == "chat.completion"  # stream forced off
        direct = alice.chat.completions.create(
            model=CHAT, messages=asks[i]["body"]["messages"], max_tokens=8, temperature=0
        )
        assert body["choices"][0]["message"]["content"] == direct.choices[0].message.content
    failed = output(alice, batch.error_file_id)
    assert list(failed) == ["bad"]
    response = failed["bad"]["response"]
    assert response["status_code"] == 400 and response["body"]["error"]["param"] == "messages"
    # The batch's files are the key's, of purpose batch_output.
    assert alice.files.retrieve(batch.output_file_id).purpose == "batch_output"


def test_embeddings_completions_and_responses_batches(alice):
    texts = ["a dog", "a cat"]
    batch = run_batch(
        alice,
        "/v1/embeddings",
        [
            line(f"e{i}", "/v1/embeddings", {"model": EMBED, "input": text})
            for i, text in enumerate(texts)
        ],
    )
    assert batch.status == "completed" and batch.request_counts.completed == 2
    vectors = output(alice, batch.output_file_id)
    direct = alice.embeddings.create(model=EMBED, input=texts)
    for i in range(2):
        got = vectors[f"e{i}"]["response"]["body"]["data"][0]["embedding"]
        assert got == pytest.approx(direct.data[i].embedding, abs=1e-5)
    completion = {"model": CHAT, "prompt": "Once upon", "max_tokens": 8, "temperature": 0}
    batch = run_batch(alice, "/v1/completions", [line("c", "/v1/completions", completion)])
    text = output(alice, batch.output_file_id)["c"]["response"]["body"]["choices"][0]["text"]
    assert text == alice.completions.create(**completion).choices[0].text
    asked = {"model": CHAT, "input": "Say something.", "max_output_tokens": 8, "temperature": 0}
    batch = run_batch(alice, "/v1/responses", [line("r", "/v1/responses", asked)])
    body = output(alice, batch.output_file_id)["r"]["response"]["body"]
    assert body["object"] == "response" and body["status"] in ("completed", "incomplete")
    assert body["output_text" if "output_text" in body else "output"]
    assert alice.responses.retrieve(body["id"]).id == body["id"]  # stored, as the key's


def test_the_input_is_checked_up_front_in_openais_words(alice):
    chat = {"model": CHAT, "messages": SAY}
    raw = b"\n".join(
        [
            b"not json",
            json.dumps(line("x", "/v1/chat/completions", chat)).encode(),
            json.dumps(line("x", "/v1/chat/completions", chat)).encode(),
            json.dumps(line("y", "/v1/embeddings", chat)).encode(),
            json.dumps(
                {"custom_id": "z", "method": "GET", "url": "/v1/chat/completions", "body": chat}
            ).encode(),
            json.dumps(line("w", "/v1/chat/completions", {"messages": SAY})).encode(),
            json.dumps({"method": "POST", "url": "/v1/chat/completions", "body": chat}).encode(),
        ]
    )
    made = alice.batches.create(
        input_file_id=upload(alice, [], raw),
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    batch = wait(alice, made.id, ("failed",))
    found = [(e.code, e.line, e.param) for e in batch.errors.data]
    assert found == [
        ("invalid_json_line", 1, None),
        ("duplicate_custom_id", 3, "custom_id"),
        ("mismatched_endpoint", 4, "url"),
        ("invalid_method", 5, "method"),
        ("missing_required_parameter", 6, "body.model"),
        ("missing_required_parameter", 7, "custom_id"),
    ]
    assert batch.failed_at and batch.output_file_id is None
    with pytest.raises(openai.NotFoundError) as missing:
        alice.batches.create(
            input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h"
        )
    assert missing.value.body["param"] == "input_file_id"
    with pytest.raises(openai.BadRequestError) as endpoint:
        alice.batches.create(
            input_file_id="file-x", endpoint="/v1/moderations", completion_window="24h"
        )  # type: ignore[arg-type]
    assert endpoint.value.body["param"] == "endpoint"
    data = alice.files.create(file=("d", io.BytesIO(b"{}\n")), purpose="user_data").id
    with pytest.raises(openai.BadRequestError) as purpose:
        alice.batches.create(
            input_file_id=data, endpoint="/v1/chat/completions", completion_window="24h"
        )
    assert purpose.value.body["code"] == "invalid_file_purpose"


def test_a_keys_model_list_applies_and_other_keys_see_nothing(server: LiveServer, keys, alice):
    limited = server.openai(keys["only-chat"])
    batch = run_batch(
        limited,
        "/v1/embeddings",
        [
            line("e", "/v1/embeddings", {"model": EMBED, "input": "x"}),
        ],
    )
    assert batch.status == "completed" and batch.request_counts.failed == 1
    refused = output(limited, batch.error_file_id)["e"]["response"]
    # What POST /v1/embeddings answers this key for a model it may not use.
    with pytest.raises(openai.PermissionDeniedError) as denied:
        limited.embeddings.create(model=EMBED, input="x")
    assert refused["status_code"] == 403 and refused["body"]["error"] == denied.value.body
    bob = server.openai(keys["b"])
    for call in (bob.batches.retrieve, bob.batches.cancel):
        with pytest.raises(openai.NotFoundError):
            call(batch.id)
    assert bob.batches.list().data == [] and bob.files.list().data == []
    with pytest.raises(openai.NotFoundError):
        bob.files.content(batch.error_file_id)
    assert batch.id in [b.id for b in limited.batches.list().data]
    assert batch.id not in [b.id for b in alice.batches.list().data]


def chat_lines(count: int) -> list[dict]:
    return [
        line(f"n{i}", "/v1/chat/completions", {"model": CHAT, "messages": SAY, "max_tokens": 8})
        for i in range(count)
    ]


def test_a_cancelled_batch_ends_with_its_partial_output(alice):
    made = alice.batches.create(
        input_file_id=upload(alice, chat_lines(60)),
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    wait(alice, made.id, ("in_progress",))
    cancelling = alice.batches.cancel(made.id)
    assert cancelling.status in ("cancelling", "cancelled") and cancelling.cancelling_at
    batch = wait(alice, made.id, ("cancelled",))
    assert batch.cancelled_at and batch.request_counts.completed < 60
    not_run = output(alice, batch.error_file_id)
    assert {row["error"]["code"] for row in not_run.values()} == {"batch_cancelled"}
    run = output(alice, batch.output_file_id) if batch.output_file_id else {}
    assert len(run) == batch.request_counts.completed and len(run) + len(not_run) == 60
    with pytest.raises(openai.ConflictError):
        alice.batches.cancel(
            wait(
                alice, run_batch(alice, "/v1/chat/completions", chat_lines(1)).id, ("completed",)
            ).id
        )


def test_a_batch_past_its_window_ends_expired(server: LiveServer, alice):
    made = alice.batches.create(
        input_file_id=upload(alice, chat_lines(60)),
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    wait(alice, made.id, ("in_progress",))
    with sqlite3.connect(server.env["DATABASE_URL"].removeprefix("sqlite:///")) as db:
        db.execute(  # the 24 hours passed
            "UPDATE batches_batch SET expires_at = '2000-01-01 00:00:00' WHERE id = ?", (made.id,)
        )
    batch = wait(alice, made.id, ("expired",))
    assert batch.expired_at and batch.request_counts.completed < 60
    not_run = output(alice, batch.error_file_id)
    assert {row["error"]["code"] for row in not_run.values()} == {"batch_expired"}
    assert len(not_run) + batch.request_counts.completed == 60


def attempts(server: LiveServer, batch_id: str) -> dict[str, int]:
    database = server.env["DATABASE_URL"].removeprefix("sqlite:///")
    with sqlite3.connect(database) as db:
        rows = db.execute(
            "SELECT custom_id, attempts FROM batches_batchline WHERE batch_id = ?", (batch_id,)
        ).fetchall()
    return dict(rows)


def test_a_batch_survives_a_restart_and_runs_no_line_twice(server: LiveServer, alice):
    """Last in the module: it stops the module's server and serves the same var/ and
    database again on a new port."""
    made = alice.batches.create(
        input_file_id=upload(alice, chat_lines(40)),
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    deadline = time.monotonic() + 60
    while alice.batches.retrieve(made.id).request_counts.completed < 4:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert server.stop(signal.SIGTERM) in (0, -signal.SIGTERM)  # uvicorn re-raises it
    before = alice.batches  # the client of the stopped server
    stopped = attempts(server, made.id)
    done_before = sum(1 for n in stopped.values() if n)
    assert 4 <= done_before < 40
    port = free_port()
    with (Path(server.env["VAR_DIR"]) / "restarted.log").open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--port", str(port)],
            cwd=ROOT,
            env=server.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    again = LiveServer(f"http://127.0.0.1:{port}", process, server.env, Path(log.name))
    try:
        again.wait_ready()
        client = again.openai(alice.api_key)
        batch = wait(client, made.id, ("completed",))
        assert (batch.request_counts.completed, batch.request_counts.failed) == (40, 0)
        assert sorted(output(client, batch.output_file_id)) == sorted(f"n{i}" for i in range(40))
        assert set(attempts(again, made.id).values()) == {1}  # no line started twice
    finally:
        again.stop()
    assert before is not None
