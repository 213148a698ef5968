"""What Claude Code and Codex send, replayed as they sent it (tests/fixtures/agents/: recorded by
scripts/record_agents.py), against a live server: every request is answered, and later turns
of a session read their prompt from the prefix cache.

The model is a tiny random Llama with SmolLM2's tokenizer and a 64k context: the recorded
prompts are 12-15k tokens, and what it writes does not matter here, only what it reads."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.helpers import ROOT, build_tiny_model
from tests.support.live_server import LiveServer, live_server

# Runs once (SQLite pass): the prompt and the prefix cache; the catalog row is only read, so
# PostgreSQL would only repeat it.
pytestmark = pytest.mark.database_independent

FIXTURES = ROOT / "tests/fixtures/agents"
MODEL = "agent-replay"
# Headers that describe the recorded connection, not the request.
HOP_HEADERS = {"accept-encoding", "connection", "content-length", "host", "authorization"}


def session(agent: str) -> list[dict]:
    """The main model's requests, in order, aimed at our model."""
    requests = json.loads((FIXTURES / f"{agent}.json").read_text())["main"]
    for request in requests:
        request["body"]["model"] = MODEL
    return requests


@pytest.fixture(scope="module")
def server(smollm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    model = build_tiny_model(
        smollm_dir, tmp_path_factory.mktemp("replay") / MODEL, max_position_embeddings=65536
    )
    add = ("add_model", MODEL, "--local", str(model), "--context-length", "65536")
    limits = ("--max-tokens", "8", "--max-output-tokens", "8", "--family", "chatml")
    with live_server(tmp_path_factory.mktemp("replay-var"), (*add, *limits)) as server:
        yield server


def send(server: LiveServer, request: dict) -> list[dict]:
    """The recorded request, headers and query included; its SSE events' data."""
    headers = {k: v for k, v in request["headers"].items() if k.lower() not in HOP_HEADERS}
    response = httpx.post(
        server.url + request["path"], json=request["body"], headers=headers, timeout=300
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return [
        json.loads(line.removeprefix("data: "))
        for line in response.text.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]


def anthropic_read(events: list[dict]) -> tuple[int, int]:
    """(prompt tokens, of which from the cache) of a streamed message, which ended well."""
    assert events[-1]["type"] == "message_stop", events[-3:]
    usage = next(e["message"]["usage"] for e in events if e["type"] == "message_start")
    cached = usage["cache_read_input_tokens"]
    return usage["input_tokens"] + cached, cached


def responses_read(events: list[dict]) -> tuple[int, int]:
    """(prompt tokens, of which from the cache) of a streamed response, which ended well."""
    final = events[-1]
    assert final["type"] in ("response.completed", "response.incomplete"), final
    usage = final["response"]["usage"]
    return usage["input_tokens"], usage["input_tokens_details"]["cached_tokens"]


def test_claude_code_session_is_answered_and_cached(server):
    reads = [anthropic_read(send(server, request)) for request in session("claude_code")]
    assert reads[0][0] > 8000  # the whole recorded prompt was read, system and tools
    for prompt, cached in reads[1:]:
        assert cached >= 0.9 * prompt, reads


def test_codex_session_is_answered_and_cached(server):
    reads = [responses_read(send(server, request)) for request in session("codex")]
    assert reads[0][0] > 8000
    for prompt, cached in reads[1:]:
        assert cached >= 0.9 * prompt, reads


def with_billing_header(request: dict, version: str) -> dict:
    changed = copy.deepcopy(request)
    first = changed["body"]["system"][0]
    assert first["text"].startswith("x-anthropic-billing-header:")
    first["text"] = f"x-anthropic-billing-header: cc_version={version}; cc_entrypoint=cli;"
    return changed


def test_the_billing_header_does_not_break_the_cache(server):
    """Two requests that differ only in Claude Code's billing header (its version and entry
    point): the second reads its prompt from the cache, the header being no part of it."""
    first = session("claude_code")[0]
    prompt, _ = anthropic_read(send(server, with_billing_header(first, "2.1.90.a1b")))
    again, cached = anthropic_read(send(server, with_billing_header(first, "2.1.91.c2d")))
    assert again == prompt
    assert cached >= 0.9 * again


def test_a_disabled_pattern_keeps_the_line(server):
    """The pattern is the catalog's to switch: with it off, the header is read again (and the
    prompt grows by its tokens)."""
    first = session("claude_code")[0]
    kept, _ = anthropic_read(send(server, first))
    toggle = "from catalog.models import PromptMetadataPattern as P; P.objects.update(enabled={})"
    server.manage("shell", "-c", toggle.format(False))
    try:
        longer, _ = anthropic_read(send(server, first))
    finally:
        server.manage("shell", "-c", toggle.format(True))
    assert longer > kept
