"""/api/pull following its HubPull row in process (no hub, no server): the progress lines as the
row's bytes grow, the end a row says (done, failed), a process that ended without a word, and
the answer without a stream."""

from __future__ import annotations

import subprocess

import pytest
from asgiref.sync import async_to_sync

from catalog.models import HubPull
from catalog.pulls import Planned
from inference.edge.auth import OPERATOR
from inference.protocol.errors import APIError
from inference.protocol.ollama.errors import OllamaError
from inference.protocol.ollama.requests import PullRequest
from inference.serving.ollama import pull
from inference.serving.ollama.pull import Started, follow, pull_model

PLANNED = Planned("r-Q4_0.gguf", "ab" * 32, 100)


@pytest.fixture
def job(transactional_db, monkeypatch) -> HubPull:
    monkeypatch.setattr(pull, "POLL_SECONDS", 0.01)
    return HubPull.objects.create(repo="o/r", model_id="r-q4_0", status="running")


@async_to_sync
async def collect(started: Started, steps: dict[int, dict]) -> list:
    """The events of `follow`; after the nth, the row is updated with steps[n]."""
    events = []
    async for event in follow(started):
        events.append(event)
        if len(events) in steps:
            await HubPull.objects.filter(pk=started.job_id).aupdate(**steps[len(events)])
    return events


def test_progress_follows_the_row_to_success(job: HubPull):
    steps = {2: {"bytes_done": 40}, 3: {"status": "done", "bytes_done": 100}}
    events = collect(Started(job.pk, PLANNED, None), steps)
    assert [e.status for e in events] == [
        "pulling manifest",
        *["pulling abababababab"] * 3,
        "verifying sha256 digest",
        "writing manifest",
        "success",
    ]
    assert [e.completed for e in events[1:4]] == [0, 40, 100]
    assert {e.digest for e in events[1:4]} == {f"sha256:{'ab' * 32}"}


def test_a_failed_row_ends_with_its_message(job: HubPull):
    events = collect(Started(job.pk, PLANNED, None), {2: {"status": "failed", "message": "no"}})
    assert events[-1] == OllamaError(error="pull failed: no")


def test_a_process_that_ended_without_a_word_is_an_error(job: HubPull):
    process = subprocess.Popen(["true"])
    process.wait()
    events = collect(Started(job.pk, PLANNED, process), {})
    assert "the pull's process ended" in events[-1].error


def test_without_a_stream_the_answer_waits_for_the_end(job: HubPull, monkeypatch):
    async def started(hub) -> Started:
        return Started(job.pk, PLANNED, None)

    monkeypatch.setattr(pull, "start", started)
    request = PullRequest(model="hf.co/o/r:Q4_0", stream=False)
    HubPull.objects.filter(pk=job.pk).update(status="done")
    assert async_to_sync(pull_model)(request, OPERATOR).status == "success"
    HubPull.objects.filter(pk=job.pk).update(status="cancelled", message="cancelled")
    with pytest.raises(APIError, match="pull cancelled: cancelled"):
        async_to_sync(pull_model)(request, OPERATOR)
