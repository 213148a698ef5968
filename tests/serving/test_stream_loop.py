"""The one stream loop (serving/pipeline.py) and its one failure branch, in every dialect: a
reply the engine fails midway, a bug in a reply writer, and the stream's own end that the edge
falls back on. Each stream runs over Generation and the dialect's real reply writer, fed by a
scripted engine."""

from __future__ import annotations

import asyncio
import json

import pytest

from catalog.models import CatalogModel
from inference.engine.types import SamplingParams
from inference.protocol.anthropic.requests import MessagesRequest
from inference.protocol.errors import APIError, server_error
from inference.protocol.openai.chat import ChatCompletionRequest
from inference.protocol.openai.completions import CompletionRequest
from inference.protocol.openai.responses_request import ResponseRequest
from inference.serving.anthropic import DIALECT as ANTHROPIC
from inference.serving.dialect import Dialect
from inference.serving.openai import DIALECT as OPENAI
from inference.serving.pipeline import event_stream
from inference.serving.plan import Plan
from inference.serving.prompts import TextPrompt
from inference.serving.resolve import ResolvedModel
from inference.serving.responses import DIALECT as RESPONSES
from inference.serving.responses import store
from inference.serving.writer import ReplyWriter, Run
from tests.serving.engine_events import (
    ADAPTER,
    SPEC,
    broken,
    context,
    generation_of,
    jobs,
    reply,
)

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = [pytest.mark.database_independent, pytest.mark.usefixtures("prepared")]

RESOLVED = ResolvedModel(CatalogModel(public_id="scripted", location="/nowhere"), SPEC, ADAPTER)
HI = [{"role": "user", "content": "Hi"}]
BODIES = {
    "chat": (OPENAI, ChatCompletionRequest, {"messages": HI}),
    "completions": (OPENAI, CompletionRequest, {"prompt": "Hi"}),
    "messages": (ANTHROPIC, MessagesRequest, {"messages": HI, "max_tokens": 8}),
    "responses": (RESPONSES, ResponseRequest, {"input": "Hi", "store": False}),
}


def writer_for(kind: str, generation, ctx, **body) -> tuple[Dialect, ReplyWriter]:
    dialect, model, fields = BODIES[kind]
    request = model.model_validate({"model": "scripted", "stream": True, **fields, **body})
    plan = Plan(raw_prompts=(TextPrompt("Hi"),)) if kind == "completions" else Plan()
    run = Run(request, ctx, RESOLVED, plan, None, SamplingParams(), generation)
    return dialect, dialect.operation(request).writer(run)


def breaks_after(writer: ReplyWriter, calls: int) -> None:
    """The writer's feed raises (a bug) once it has written `calls` engine events."""
    real, seen = writer.feed, []

    def feed(choice, event):
        seen.append(event)
        if len(seen) > calls:
            raise KeyError("bug in the writer")
        return real(choice, event)

    writer.feed = feed  # type: ignore[method-assign]


def stream(kind: str, script, bug_after: int | None = None, **body) -> list[str]:
    async def go():
        ctx = context(script)
        generation = await generation_of(ctx, jobs(1))
        dialect, writer = writer_for(kind, generation, ctx, **body)
        if bug_after is not None:
            breaks_after(writer, bug_after)
        return [line async for line in event_stream(dialect, writer).lines]

    return asyncio.run(go())


def data(line: str) -> dict:
    return json.loads(line.split("data: ", 1)[1])


def named(line: str) -> tuple[str, dict]:
    head, _ = line.split("\n", 1)
    return head.removeprefix("event: "), data(line)


@pytest.mark.parametrize("kind", ["chat", "completions"])
@pytest.mark.parametrize("bug", [False, True])
def test_openai_streams_end_with_an_error_event_then_done(kind, bug):
    script = reply("Hello") if bug else broken("Hel")
    lines = stream(kind, script, bug_after=3 if bug else None)
    assert lines[-1] == "data: [DONE]\n\n"
    error = data(lines[-2])["error"]
    assert (error["type"], error["code"]) == ("server_error", "server_error")
    assert "bug in" not in "".join(lines) and "device lost" not in "".join(lines)
    chunks = [data(line) for line in lines[:-2]]
    assert all(chunk["id"] == chunks[0]["id"] for chunk in chunks)
    assert not any(choice.get("finish_reason") for c in chunks for choice in c["choices"])


@pytest.mark.parametrize("bug", [False, True])
def test_a_messages_stream_ends_with_an_error_event_and_nothing_after(bug):
    script = reply("Hello") if bug else broken("Hel")
    events = [named(line) for line in stream("messages", script, bug_after=3 if bug else None)]
    name, body = events[-1]
    assert name == "error"
    assert body["type"] == "error" and body["error"]["type"] == "api_error"
    assert set(body["error"]) == {"type", "message"}
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "ping"]
    assert "message_stop" not in names and "message_delta" not in names


def numbers(events: list[tuple[str, dict]]) -> list[int]:
    return [body["sequence_number"] for _, body in events]


def test_a_responses_reply_the_engine_fails_is_a_failed_response_numbered_on():
    events = [named(line) for line in stream("responses", broken("Hel"))]
    assert numbers(events) == list(range(len(events)))  # 0, 1, 2...: none skipped, none 0 again
    name, body = events[-1]
    assert name == "response.failed"
    assert body["response"]["status"] == "failed"
    assert body["response"]["error"]["code"] == "server_error"
    assert body["response"]["output"][0]["content"][0]["text"] == "Hel"


def test_a_bug_mid_responses_stream_ends_with_an_error_event_carrying_the_next_number():
    events = [named(line) for line in stream("responses", reply("Hello"), bug_after=3)]
    name, body = events[-1]
    assert name == "error"
    assert body["code"] == "server_error" and "bug in" not in body["message"]
    assert numbers(events) == list(range(len(events)))
    assert body["sequence_number"] == len(events) - 1 > 0


def test_a_response_the_store_refuses_ends_with_its_error_numbered_on(monkeypatch):
    async def refuse(*args, **kwargs):
        raise APIError("This response is too large to store.", status=413, code="too_large")

    monkeypatch.setattr(store, "save", refuse)
    events = [named(line) for line in stream("responses", reply("Hi"), store=True)]
    name, body = events[-1]
    assert (name, body["code"]) == ("error", "too_large")
    assert numbers(events) == list(range(len(events)))
    assert "response.completed" not in [name for name, _ in events]  # never claimed stored


def test_the_streams_own_end_is_what_the_edge_falls_back_on():
    """Past the loop (a bug at the edge), the stream still ends its own way: for Responses,
    with the number its next event would have carried."""

    async def go():
        ctx = context(reply("Hello"))
        generation = await generation_of(ctx, jobs(1))
        dialect, writer = writer_for("responses", generation, ctx)
        events = event_stream(dialect, writer)
        first = [await anext(events.lines) for _ in range(3)]
        await events.lines.aclose()
        return first, events.end(server_error())

    first, (end,) = asyncio.run(go())
    assert [named(line)[1]["sequence_number"] for line in first] == [0, 1, 2]
    name, body = named(end)
    assert (name, body["sequence_number"]) == ("error", 3)


def test_a_finished_stream_ends_as_its_dialect_says():
    chat = stream("chat", reply("Hi"))
    assert chat[-1] == "data: [DONE]\n\n"
    assert data(chat[-2])["choices"][0]["finish_reason"] == "stop"
    messages = [named(line)[0] for line in stream("messages", reply("Hi"))]
    assert messages[-2:] == ["message_delta", "message_stop"]
    responses = [named(line) for line in stream("responses", reply("Hi"))]
    assert responses[-1][0] == "response.completed"
    assert numbers(responses) == list(range(len(responses)))
