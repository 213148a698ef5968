"""Two real server instances on one PostgreSQL behind a real HAProxy: a key's concurrency limit
holds across both (SHARED_LIMITS), and a killed instance's slot frees itself when its lease
expires, not before. PostgreSQL only (tests/conftest.py leaves it out of the SQLite pass)."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

from tests.support.helpers import DEMO_ID, ROOT
from tests.support.live_server import (
    LiveServer,
    drop_database,
    free_port,
    fresh_postgres_url,
    live_server,
)

pytestmark = pytest.mark.postgres_only

LEASE = 3.0  # seconds: short, so the expiry is seen within the test
SHARED = {
    "SHARED_LIMITS": "true",
    "SHARED_LIMITS_LEASE_SECONDS": str(LEASE),
    "REQUIRE_API_KEY": "true",
}
# SmolLM2's end tokens (<|endoftext|>, <|im_end|>) never sampled: the answer runs to max_tokens,
# a stream that stays open as long as the test needs it.
ENDLESS = {"0": -100, "2": -100}
HAPROXY_CONFIG = """\
global
    maxconn 256
defaults
    mode http
    timeout connect 5s
    # Streams run as long as generation does: long client and server timeouts.
    timeout client 1h
    timeout server 1h
    timeout http-keep-alive 10s
    # A request sent to an instance that just died goes to the other one.
    option redispatch
    retries 2
frontend api
    bind 127.0.0.1:{port}
    default_backend replicas
backend replicas
    balance roundrobin
    option httpchk GET /health/ready
    server a 127.0.0.1:{port_a} check inter 1s fall 2 rise 1
    server b 127.0.0.1:{port_b} check inter 1s fall 2 rise 1
"""


@pytest.fixture(scope="module")
def haproxy_bin() -> str:
    script = ROOT / "scripts/ensure_haproxy.sh"
    result = subprocess.run(["sh", str(script)], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.fail(f"{script} failed:\n{result.stderr[-3000:]}")
    return result.stdout.strip().splitlines()[-1]


@contextmanager
def replicas(demo_gguf: Path, var: Path) -> Iterator[tuple[LiveServer, LiveServer]]:
    """Instances a and b on one fresh database; the demo model imported once, by a."""
    url = fresh_postgres_url()
    try:
        with ExitStack() as stack:
            setup = ("import_gguf", str(demo_gguf), "--id", DEMO_ID)
            a = stack.enter_context(
                live_server(var / "a", setup, DATABASE_URL=url, INSTANCE_NAME="replica-a", **SHARED)
            )
            b = stack.enter_context(
                live_server(var / "b", DATABASE_URL=url, INSTANCE_NAME="replica-b", **SHARED)
            )
            yield a, b
    finally:
        drop_database(url)


@contextmanager
def haproxy(binary: str, var: Path, a: LiveServer, b: LiveServer) -> Iterator[str]:
    port = free_port()
    config = var / "haproxy.cfg"
    port_a, port_b = (server.url.rsplit(":", 1)[1] for server in (a, b))
    config.write_text(HAPROXY_CONFIG.format(port=port, port_a=port_a, port_b=port_b))
    check = subprocess.run([binary, "-c", "-f", str(config)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    log = (var / "haproxy.log").open("w")
    process = subprocess.Popen([binary, "-db", "-f", str(config)], stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for(lambda: httpx.get(f"{url}/health", timeout=2).status_code == 200, 10)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


def _wait_for(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    pytest.fail(f"not so within {timeout} s")


class Stream:
    """One long streaming chat request, read on a thread until closed (or its server dies)."""

    def __init__(self, url: str, key: str) -> None:
        self.started = threading.Event()
        self.chunks = 0
        self._stop = threading.Event()
        self._client = httpx.Client(timeout=httpx.Timeout(10, read=60))
        body = _chat(max_tokens=4000, stream=True, logit_bias=ENDLESS, temperature=1.0)
        args = (f"{url}/v1/chat/completions", body, _auth(key))
        self._thread = threading.Thread(target=self._read, args=args, daemon=True)
        self._thread.start()
        assert self.started.wait(60), "the stream never started"

    def _read(self, url: str, body: dict, headers: dict) -> None:
        try:
            with self._client.stream("POST", url, json=body, headers=headers) as response:
                assert response.status_code == 200, response.read()
                for _ in response.iter_lines():
                    self.chunks += 1
                    self.started.set()
                    if self._stop.is_set():
                        return
        except httpx.HTTPError:
            pass  # its instance was killed

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._client.close()


def _chat(**fields) -> dict:
    messages = [{"role": "user", "content": "Tell me a very long story."}]
    return {"model": DEMO_ID, "messages": messages, **fields}


def _auth(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def _running(server: LiveServer) -> int:
    return server.health()["running_sequences"]


def _short(url: str, key: str) -> httpx.Response:
    body = _chat(max_tokens=2, temperature=0)
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=_auth(key), timeout=60)


def test_two_instances_share_a_keys_limit_and_a_dead_ones_slot_expires(
    demo_gguf: Path, haproxy_bin: str, tmp_path: Path
):
    with replicas(demo_gguf, tmp_path) as (a, b), haproxy(haproxy_bin, tmp_path, a, b) as lb:
        _labelled(a, "replica-a")
        _labelled(b, "replica-b")
        key = a.manage("create_api_key", "replicas", "--max-concurrent", "2").stdout.strip()
        assert _short(lb, key).status_code == 200  # loads the model on one of them
        assert _short(lb, key).status_code == 200  # and, round robin, on the other
        streams = [Stream(lb, key), Stream(lb, key)]
        try:
            # Round robin: one on each instance, so each instance alone is under the limit.
            _wait_for(lambda: (_running(a), _running(b)) == (1, 1), 10)
            third = _short(lb, key)
            assert third.status_code == 429, third.text
            assert third.json()["error"]["code"] == "concurrency_limit_exceeded"
            _slot_freed_by_expiry(a, b, lb, key)
            assert streams[1].chunks > 0  # b's stream went on throughout
        finally:
            for stream in streams:
                stream.close()


def _labelled(server: LiveServer, name: str) -> None:
    assert server.health()["instance"] == name
    metrics = httpx.get(f"{server.url}/metrics", timeout=5).text
    assert f'inference_server_instance_info{{server_instance="{name}"}} 1.0' in metrics


def _slot_freed_by_expiry(a: LiveServer, b: LiveServer, lb: str, key: str) -> None:
    """a dies mid-stream: its slot is still counted until its lease runs out (renewed every
    LEASE/3, so between 2/3 of a lease and a lease after the kill), then a new request passes."""
    killed = time.monotonic()
    a.stop(signal.SIGKILL)
    refused = _short(lb, key)
    assert refused.status_code == 429, refused.text  # b answers: a's slot still holds
    while (response := _short(lb, key)).status_code == 429:
        assert time.monotonic() - killed < LEASE + 3, "a's slot was never freed"
        time.sleep(0.2)
    freed = time.monotonic() - killed
    assert response.status_code == 200, response.text
    assert freed >= LEASE * 2 / 3 - 0.5, f"freed after {freed:.1f} s: before its lease ran out"
    print(json.dumps({"slot_freed_after_s": round(freed, 2), "lease_s": LEASE}))


@pytest.mark.django_db
def test_slots_are_counted_per_key_and_expired_leases_are_swept():
    from datetime import timedelta

    from django.utils import timezone

    from apikeys.models import ApiKey, ConcurrencySlot
    from apikeys.slots import renew, take_slot

    key = ApiKey(name="k")
    key.new_secret()
    key.save()
    other = ApiKey(name="other")
    other.new_secret()
    other.save()
    first, second = (take_slot(key.pk, 2, "a", f"r{i}", LEASE, []) for i in range(2))
    assert first and second
    assert take_slot(key.pk, 2, "b", "r3", LEASE, []) is None  # at its limit, on any instance
    assert take_slot(other.pk, 2, "b", "r4", LEASE, [])  # another key's limit is its own
    past = timezone.now() - timedelta(seconds=1)
    ConcurrencySlot.objects.filter(pk=first).update(expires_at=past)  # its instance died
    assert take_slot(key.pk, 2, "b", "r5", LEASE, [])  # the dead lease is swept, not counted
    assert not ConcurrencySlot.objects.filter(pk=first).exists()
    assert take_slot(key.pk, 2, "b", "r6", LEASE, [second])  # released here: free at once
    assert renew([second, first], LEASE) == 0  # both gone: renewal does not bring them back
