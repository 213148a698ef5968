"""A live server survives its engine dying, and shuts down without cutting a stream short."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.live_server import LiveServer, live_server

LONG = {
    "model": "tiny",
    "messages": [{"role": "user", "content": "Tell me a very long story."}],
    "max_tokens": 100_000,
    "temperature": 0,
    "logit_bias": {"2": -100},  # never the end-of-text token: runs to the context's end
    "stream": True,
}
SHORT = {**LONG, "max_tokens": 3, "stream": False}


def sse_events(response: httpx.Response) -> Iterator[str]:
    for line in response.iter_lines():
        if line.startswith("data: "):
            yield line.removeprefix("data: ")


@pytest.fixture(scope="module")
def server(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    setup = ("add_model", "tiny", "--local", str(tiny_dir), "--pinned", "--preload")
    var = tmp_path_factory.mktemp("resilience")
    with live_server(var, setup, ENGINE_FAULT_INJECTION="true") as server:
        yield server


def test_engine_crash_ends_streams_cleanly_and_recovers_quickly(server: LiveServer):
    with httpx.stream("POST", f"{server.api}/chat/completions", json=LONG, timeout=60) as stream:
        events = sse_events(stream)
        json.loads(next(events))  # generating
        crash = httpx.post(
            f"{server.url}/control/engine/fault",
            json={"kind": "crash"},
            headers=server.admin_headers,
        )
        assert crash.status_code == 200
        crashed = time.monotonic()
        rest = list(events)
    assert rest[-1] == "[DONE]"
    assert json.loads(rest[-2])["error"]["code"] == "engine_restarted"
    while True:  # ready again, and serving
        ready = httpx.get(f"{server.url}/health/ready").status_code == 200
        if ready and httpx.post(f"{server.api}/chat/completions", json=SHORT).status_code == 200:
            break
        assert time.monotonic() - crashed < 10, server.output()
        time.sleep(0.1)
    health = server.health()
    assert health["engine_restarts"] == 1
    assert "InjectedFault" in server.output()
    assert health["loaded_models"] == ["tiny"]  # pinned: reloaded by the supervisor
    assert health["running_sequences"] == 0


def test_sigterm_drains_then_ends_the_rest_with_an_error_event(
    tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory
):
    # The tiny model's own context (512) would end the long stream before the drain does.
    setup = (
        "add_model",
        "tiny",
        "--local",
        str(tiny_dir),
        "--preload",
        "--context-length",
        "20000",
    )
    var = tmp_path_factory.mktemp("drain")
    with live_server(var, setup, DRAIN_TIMEOUT="3") as server:
        url = f"{server.api}/chat/completions"
        results: dict[str, list[str]] = {}
        short_started = threading.Event()

        def short_stream() -> None:
            body = {**LONG, "max_tokens": 20}
            with httpx.stream("POST", url, json=body, timeout=60) as response:
                events = sse_events(response)
                results["short"] = [next(events)]
                short_started.set()
                results["short"] += list(events)

        with httpx.stream("POST", url, json=LONG, timeout=60) as long_stream:
            events = sse_events(long_stream)
            next(events)
            short = threading.Thread(target=short_stream)
            short.start()
            assert short_started.wait(timeout=30), server.output()
            server.process.terminate()  # SIGTERM, with both streams generating
            signalled = time.monotonic()
            rest = list(events)
            drained = time.monotonic() - signalled
        short.join(timeout=30)
        exit_code = server.stop(timeout=30)
        # The long stream was given the drain time, then ended the OpenAI way.
        assert rest[-1] == "[DONE]"
        error = json.loads(rest[-2])["error"]
        assert error["code"] == "shutting_down"
        assert 2.5 < drained < 8
        # The short one, already running, finished normally within the drain time.
        chunks = [json.loads(e) for e in results["short"][:-1]]
        assert results["short"][-1] == "[DONE]"
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"
        assert all("error" not in c for c in chunks)
        # No new connections once shutting down, and a clean exit.
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{server.url}/health/live", timeout=2)
        assert exit_code in (0, -15)
        assert "shutting down: 2 generation(s) running" in server.output()
