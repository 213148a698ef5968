"""The edge: every request's context is closed exactly once, whichever way it ends, and errors
are written in the dialect the endpoint declares."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient, AsyncRequestFactory
from pydantic import BaseModel

from apikeys.auth import limiter
from apikeys.models import ApiKey
from catalog.models import CatalogModel
from inference.edge import Dialect, endpoint
from inference.engine.types import SamplingParams
from inference.observability import records
from inference.protocol.errors import APIError
from inference.runtime import engine_handle, get_supervisor
from inference.serving.prompts import ChatPrompt, PromptJob
from tests.support.helpers import CHAT, SHORT_CHAT, wait_until

LONG = {**SHORT_CHAT, "max_tokens": 400, "stream": True}


def key_with_one_slot() -> tuple[ApiKey, dict]:
    key = ApiKey(name="edge-key", max_concurrent_requests=1)
    secret = key.new_secret()
    key.save()
    return key, {"Authorization": f"Bearer {secret}"}


def engine_idle() -> bool:
    health = engine_handle().health()
    return health.running == 0 and get_supervisor().admission.live == 0


@pytest.mark.django_db(transaction=True)
def test_an_abandoned_stream_gives_back_slot_jobs_and_record_once(tiny_dir):
    CatalogModel.objects.create(public_id="tiny", location=str(tiny_dir))
    key, auth = key_with_one_slot()

    async def read_two_chunks_then_leave() -> tuple[str, str]:
        response = await AsyncClient().post(
            CHAT, LONG, content_type="application/json", headers=auth
        )
        chunks = response.streaming_content
        first = [await anext(chunks), await anext(chunks)]
        await chunks.aclose()  # what Django's handler does when the client hangs up
        response.close()  # and a second close changes nothing
        return response["X-Request-ID"], b"".join(first).decode()

    request_id, text = async_to_sync(read_two_chunks_then_leave)()
    assert text.startswith("data: ")
    assert wait_until(engine_idle, timeout=1.0)  # the engine dropped the sequence at once
    assert key.pk not in limiter._running  # the slot is back, and not given back twice
    mine = [r for r in records.recent if r["id"] == request_id]
    assert len(mine) == 1 and mine[0]["key"] == "edge-key" and mine[0]["status"] == 200
    # The key's one slot is free again.
    again = async_to_sync(AsyncClient().post)(
        CHAT, SHORT_CHAT, content_type="application/json", headers=auth
    )
    assert again.status_code == 200


@pytest.mark.django_db(transaction=True)
def test_a_request_refused_by_its_keys_cap_is_recorded_with_the_key(tiny_dir):
    CatalogModel.objects.create(public_id="tiny", location=str(tiny_dir))
    _, auth = key_with_one_slot()

    async def second_while_first_streams():
        client = AsyncClient()
        first = await client.post(CHAT, LONG, content_type="application/json", headers=auth)
        second = await client.post(CHAT, SHORT_CHAT, content_type="application/json", headers=auth)
        await first.streaming_content.aclose()  # never started: Django closes it, as here
        first.close()
        return second

    second = async_to_sync(second_while_first_streams)()
    assert second.status_code == 429
    record = next(r for r in records.recent if r["id"] == second["X-Request-ID"])
    assert record["key"] == "edge-key"  # was "anonymous" when the caller came after the cap
    assert record["error_code"] == "concurrency_limit_exceeded"
    assert wait_until(engine_idle)


@pytest.mark.django_db(transaction=True)
def test_a_view_cancelled_mid_generation_releases_everything(tiny_dir):
    """The client leaves while a non-streaming answer is generated: Django cancels the view."""
    CatalogModel.objects.create(public_id="tiny", location=str(tiny_dir))
    key, auth = key_with_one_slot()
    body = {**LONG, "stream": False}

    async def cancel_after_a_moment():
        task = asyncio.ensure_future(
            AsyncClient().post(CHAT, body, content_type="application/json", headers=auth)
        )
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    async_to_sync(cancel_after_a_moment)()
    assert wait_until(engine_idle, timeout=1.0)
    assert key.pk not in limiter._running
    assert records.recent[0]["status"] == 499 and records.recent[0]["key"] == "edge-key"


class Failure(BaseModel):
    kind: str = "failure"
    why: str
    status: int


# A made-up dialect: the edge must write every error of its endpoints this way.
BRACKETS = Dialect("brackets", lambda error: Failure(why=error.message, status=error.status))


@endpoint("POST", dialect=BRACKETS)
async def refusing(request, ctx):
    raise APIError("no, thank you", status=422)


@endpoint("POST", dialect=BRACKETS)
async def buggy(request, ctx):
    raise KeyError("a bug")


def test_errors_are_written_in_the_endpoints_dialect():
    factory = AsyncRequestFactory()
    refused = async_to_sync(refusing)(factory.post("/x"))
    assert refused.status_code == 422
    assert json.loads(refused.content) == {"kind": "failure", "why": "no, thank you", "status": 422}
    wrong_method = async_to_sync(refusing)(factory.get("/x"))
    assert wrong_method.status_code == 405
    assert json.loads(wrong_method.content)["kind"] == "failure"
    crashed = async_to_sync(buggy)(factory.post("/x"))
    assert crashed.status_code == 500
    assert "a bug" not in crashed.content.decode()


@endpoint("POST")
async def refusing_openai(request, ctx):
    raise APIError("no, thank you", status=422, param="x", code="nope")


def test_the_openai_dialect_is_the_default():
    refused = async_to_sync(refusing_openai)(AsyncRequestFactory().post("/x"))
    assert refused.status_code == 422
    assert json.loads(refused.content) == {
        "error": {
            "message": "no, thank you",
            "type": "invalid_request_error",
            "param": "x",
            "code": "nope",
        }
    }


@pytest.mark.django_db(transaction=True)
def test_a_job_stream_is_released_once_however_often_it_is_asked(tiny_dir):
    from inference.adapters import FamilyProfile, get_adapter
    from inference.engine.types import ModelSpec
    from inference.serving.prepare import prepare_now

    spec = ModelSpec(model_id="tiny", location=str(tiny_dir))
    request = prepare_now(
        PromptJob(
            spec,
            get_adapter(FamilyProfile(adapter="chatml")),
            ChatPrompt([{"role": "user", "content": "Hi"}]),
            SamplingParams(temperature=0, max_tokens=400, logit_bias={2: -100}),
        )
    )
    admission = get_supervisor().admission

    assert wait_until(engine_idle)

    async def start_read_release():
        stream = engine_handle().start([request, request])
        assert admission.live == 2
        await stream.next()
        stream.release()
        stream.release()
        return stream

    stream = async_to_sync(start_read_release)()
    assert admission.live == 0
    assert all(job.cancelled.is_set() for job in stream.jobs)
    assert wait_until(engine_idle, timeout=1.0)
