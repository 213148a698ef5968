"""Safe to expose (README "Running it on a network"): `manage.py serve` refuses a network
address while /v1 takes no key unless told so, anonymous callers share a key's concurrency
limit, the probes tell the public only ok or not, /metrics can take a token, and the
deployment settings (proxy TLS header, HSTS, secure cookies, CSP) reach the responses."""

from __future__ import annotations

import io
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.test import Client

from tests.support.helpers import ROOT
from tests.support.live_server import LiveServer, free_port, live_server, manage, server_env

METRICS_TOKEN = "scrape-me"
HTTPS = {"X-Forwarded-Proto": "https"}  # what a TLS-terminating proxy adds
LONG = {
    "model": "tiny",
    "messages": [{"role": "user", "content": "Tell me a very long story."}],
    "max_tokens": 100_000,
    "logit_bias": {"2": -100},  # never the end-of-text token: it runs until closed
    "stream": True,
}


def test_serve_refuses_a_network_address_without_keys(tmp_path: Path) -> None:
    env = server_env(tmp_path)  # REQUIRE_API_KEY=false, no key in its database
    manage(env, "migrate", "--noinput", "-v0")
    argv = [sys.executable, "manage.py", "serve", "--host", "0.0.0.0", "--port", str(free_port())]
    refused = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0
    for advice in ("create_api_key", "REQUIRE_API_KEY=true", "ALLOW_ANONYMOUS_ON_NETWORK=true"):
        assert advice in refused.stderr, refused.stderr


@pytest.fixture(scope="module")
def server(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """On every address, keys off by the override, as deployed behind a TLS proxy."""
    # A context far past the tiny model's 512 tokens: a stream runs until its client leaves.
    setup = ("add_model", "tiny", "--local", str(tiny_dir), "--pinned", "--preload")
    setup += ("--context-length", "1000000")
    with live_server(
        tmp_path_factory.mktemp("exposed"),
        setup,
        HOST="0.0.0.0",
        ALLOW_ANONYMOUS_ON_NETWORK="true",
        API_KEY_MAX_CONCURRENT="1",
        METRICS_TOKEN=METRICS_TOKEN,
        TRUST_PROXY_SSL_HEADER="true",
        SECURE_HSTS_SECONDS="3600",
        SECURE_COOKIES="true",
    ) as server:
        yield server


def test_the_override_serves_on_every_address(server: LiveServer) -> None:
    assert "refusing" not in server.output()
    assert httpx.get(f"{server.url}/health/live", timeout=10).status_code == 200


def read_until_closed(lines: Iterator[str]) -> None:
    try:
        for _ in lines:
            pass
    except (httpx.HTTPError, httpx.StreamError):  # closed under it as the test ends
        pass


def test_anonymous_callers_share_a_default_keys_limit(server: LiveServer) -> None:
    with httpx.stream("POST", f"{server.api}/chat/completions", json=LONG, timeout=60) as stream:
        lines = stream.iter_lines()
        next(line for line in lines if line.startswith("data: "))  # generating
        # Read on as a client does: a stream nobody reads was seen to hold up the next
        # request's key check (its database query) until the stream ended.
        reader = threading.Thread(target=read_until_closed, args=(lines,), daemon=True)
        reader.start()
        second = httpx.post(f"{server.api}/chat/completions", json=LONG, timeout=30)
        assert second.status_code == 429, second.text
        assert second.json()["error"]["code"] == "concurrency_limit_exceeded"
        assert "without an API key (limit 1)" in second.json()["error"]["message"]


def test_health_tells_the_public_only_ok(server: LiveServer) -> None:
    for path in ("/health", "/health/ready", "/health/live"):
        public = httpx.get(f"{server.url}{path}", timeout=10)
        assert (public.status_code, public.json()) == (200, {"status": "ok"}), path
        assert "tiny" not in public.text
    details = server.health(timeout=10)
    assert details["loaded_models"] == ["tiny"] and "blas" in details
    # What the loaded model computes with, for the operator only.
    computing = details["models"]["tiny"]
    assert computing["kv_cache"] in ("float16", "native") and computing["context_length"] > 0
    assert computing["compute_format"] in ("stored", "float32")
    # How the kernels' integer decode path rounds (the catalog's default); "" off their path.
    assert computing["activations"] in ("15bit", "")
    wrong = httpx.get(f"{server.url}/health", headers={"Authorization": "Bearer nope"})
    assert wrong.json() == {"status": "ok"}  # a probe never fails on a token


def test_metrics_take_the_metrics_token(server: LiveServer) -> None:
    refused = httpx.get(f"{server.url}/metrics", timeout=10)
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "invalid_metrics_token"
    scraper = {"Authorization": f"Bearer {METRICS_TOKEN}"}
    for headers in (scraper, server.admin_headers):
        scraped = httpx.get(f"{server.url}/metrics", headers=headers, timeout=10)
        assert scraped.status_code == 200 and "inference_" in scraped.text


def test_hsts_only_over_the_proxys_https(server: LiveServer) -> None:
    secure = httpx.get(f"{server.url}/health/live", headers=HTTPS, timeout=10)
    assert secure.headers["Strict-Transport-Security"] == "max-age=3600"
    plain = httpx.get(f"{server.url}/health/live", timeout=10)
    assert "Strict-Transport-Security" not in plain.headers


def test_admin_pages_have_a_csp_and_secure_cookies(server: LiveServer) -> None:
    login = httpx.get(f"{server.url}/admin/login/", headers=HTTPS, timeout=10)
    assert login.status_code == 200
    assert "script-src 'self'" in login.headers["Content-Security-Policy"]
    csrf = next(c for c in login.headers.get_list("set-cookie") if c.startswith("csrftoken="))
    assert "; secure" in csrf.lower()
    probe = httpx.get(f"{server.url}/health/live", timeout=10)
    assert "Content-Security-Policy" not in probe.headers  # JSON runs no script


@pytest.mark.django_db
def test_staff_sessions_see_details_and_the_dashboard_has_a_csp(settings) -> None:
    from django.contrib.auth.models import User

    settings.SESSION_COOKIE_SECURE = True
    from django.contrib.auth.models import Permission

    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="use_playground"))
    client = Client()
    assert client.get("/health").json() == {"status": "ok"}
    signed_in = client.post("/admin/login/", {"username": "staff", "password": "pw"})
    assert signed_in.cookies["sessionid"]["secure"]
    assert "loaded_models" in client.get("/health").json()  # the session, no token
    for page in ("/", "/playground"):
        response = client.get(page)
        assert response.status_code == 200, page
        assert "default-src 'self'" in response["Content-Security-Policy"], page


@pytest.mark.django_db
def test_loopback_a_key_or_required_keys_let_serve_start(settings) -> None:
    from django.core.management import call_command
    from django.core.management.base import CommandError

    from inference.management.commands.serve import Command

    refuse = Command()._refuse_if_open
    for loopback in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        refuse(loopback)
    for network in ("0.0.0.0", "::", "192.168.1.5", "my-host"):
        with pytest.raises(CommandError, match="ALLOW_ANONYMOUS_ON_NETWORK"):
            refuse(network)
    settings.REQUIRE_API_KEY = True
    refuse("0.0.0.0")
    settings.REQUIRE_API_KEY = False
    call_command("create_api_key", "someone", stdout=io.StringIO())  # the secret: not needed
    refuse("0.0.0.0")
