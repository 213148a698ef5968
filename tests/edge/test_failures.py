"""Failures inside the server: generic 500s, and errors in the middle of a stream."""

import json
import time

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient
from openai.types.chat import ChatCompletionChunk

from catalog.models import CatalogModel
from inference.serving import prelude
from inference.serving.reply import ReplyParser
from tests.support.helpers import break_engine_after
from tests.support.responses_support import check_stream_events, stream

CHAT = "/v1/chat/completions"
BODY = {
    "model": "tiny",
    "messages": [{"role": "user", "content": "Hi"}],
    "max_tokens": 20,
    "temperature": 0,
    "logit_bias": {"2": -100},
}


def test_unexpected_errors_are_generic_500s(client, db, monkeypatch, caplog):
    async def broken(model_id, caller, purpose):
        raise RuntimeError("secret internals at /home/admin/.ssh")

    monkeypatch.setattr(prelude, "resolve_model", broken)
    response = client.post(CHAT, BODY, content_type="application/json")
    assert response.status_code == 500
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("server_error", "server_error")
    assert "secret" not in response.content.decode()
    assert "secret internals" in caplog.text  # logged for the operator, not sent to the client


@pytest.mark.django_db(transaction=True)
def test_failure_mid_stream_sends_an_error_event_then_done(tiny_dir, monkeypatch):
    CatalogModel.objects.create(public_id="tiny", location=str(tiny_dir))
    break_engine_after(monkeypatch, 3)

    async def go():
        response = await AsyncClient().post(
            CHAT, {**BODY, "stream": True}, content_type="application/json"
        )
        return response.status_code, b"".join([c async for c in response.streaming_content])

    status, raw = async_to_sync(go)()
    assert status == 200
    events = [e.removeprefix("data: ") for e in raw.decode().split("\n\n") if e]
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["type"] == "server_error"
    assert "device lost" not in raw.decode()
    chunks = [ChatCompletionChunk.model_validate_json(e) for e in events[:-2]]
    assert "".join(c.choices[0].delta.content or "" for c in chunks)  # some text came first
    monkeypatch.undo()
    # The engine keeps serving.
    again = async_to_sync(AsyncClient().post)(CHAT, BODY, content_type="application/json")
    assert again.status_code == 200


def test_request_timeout_is_a_504_and_frees_the_engine(client, tiny_dir, db, settings):
    CatalogModel.objects.create(public_id="tiny", location=str(tiny_dir))
    settings.REQUEST_TIMEOUT = 0.5
    response = client.post(CHAT, {**BODY, "max_tokens": 5000}, content_type="application/json")
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "timeout"
    from inference.runtime import engine_handle

    deadline = time.monotonic() + 2
    while engine_handle().health().running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert engine_handle().health().running == 0


@pytest.mark.django_db(transaction=True)
def test_a_bug_while_streaming_still_ends_the_stream_cleanly(tiny_dir, monkeypatch):
    CatalogModel.objects.create(public_id="tiny", location=str(tiny_dir))

    def broken_feed(self, text):
        raise KeyError("bug in the tool-call filter")

    monkeypatch.setattr(ReplyParser, "feed", broken_feed)

    async def go():
        response = await AsyncClient().post(
            CHAT, {**BODY, "stream": True}, content_type="application/json"
        )
        return b"".join([c async for c in response.streaming_content]).decode()

    events = [e.removeprefix("data: ") for e in async_to_sync(go)().split("\n\n") if e]
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["error"]["code"] == "server_error"
    assert "bug in" not in "".join(events)


def test_a_responses_stream_broken_midway_ends_with_the_next_sequence_number(
    tiny_entry, monkeypatch
):
    """A bug after the reply began: the `error` event that ends the stream carries the number
    after the last event sent (it was 0 when the edge wrote it)."""
    real_feed, fed = ReplyParser.feed, []

    def feed_then_break(self, text):
        fed.append(text)
        if len(fed) > 1:
            raise KeyError("bug in the parser")
        return real_feed(self, text)

    monkeypatch.setattr(ReplyParser, "feed", feed_then_break)
    _, _, events = stream({"max_output_tokens": 20, "temperature": 0, "store": False})
    check_stream_events(events)  # numbered 0, 1, 2... to the last
    name, data = events[-1]
    assert (name, data["code"]) == ("error", "server_error")
    assert data["sequence_number"] == len(events) - 1 >= 2
    assert len(fed) == 2 and "bug in" not in data["message"]
