"""Remote image fetching (serving/image_fetch.py) refuses to be a way into the server's own
network: the address guard itself; then fetches from a local server, which is loopback, so
each test says how loopback counts. The seam is `first_hop_loopback`: it lets the URL's own
host be 127.0.0.1 and checks every later hop with the real guard (redirects to loopback are
what is refused); tests that need no redirect trust 127.0.0.1/32 through the operator's own
setting, IMAGE_FETCH_PRIVATE_NETWORKS."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time

import pytest

from inference.protocol.errors import APIError
from inference.serving import image_fetch
from inference.serving.images import ImageSource, image_bytes
from tests.support.image_server import IMAGE, ImageServer, image_server

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

PARAM = "messages.0.content.1"


@pytest.fixture
def fetching(settings):
    settings.IMAGE_FETCH_REMOTE = True
    settings.IMAGE_FETCH_TIMEOUT = 3.0
    settings.IMAGE_FETCH_ALLOWED_HOSTS = []
    settings.IMAGE_FETCH_PRIVATE_NETWORKS = []
    return settings


@pytest.fixture
def served():
    with image_server() as server:
        yield server


@pytest.fixture
def first_hop_loopback(monkeypatch: pytest.MonkeyPatch) -> list:
    """The first address checked (the URL's own host) may be loopback; every later one meets
    the real guard. Returns the addresses checked, in order."""
    checked: list = []
    real = image_fetch.address_allowed

    def allowed(address) -> bool:
        checked.append(address)
        return (len(checked) == 1 and address.is_loopback) or real(address)

    monkeypatch.setattr(image_fetch, "address_allowed", allowed)
    return checked


def fetch(url: str) -> bytes:
    return asyncio.run(image_bytes(ImageSource(param=PARAM, url=url)))


def refused(url: str, caplog: pytest.LogCaptureFixture) -> tuple[str, str]:
    """The caller's error message and what the log says, for a fetch that must fail."""
    with caplog.at_level(logging.WARNING), pytest.raises(APIError) as caught:
        fetch(url)
    assert caught.value.param == PARAM and caught.value.code == "invalid_image"
    assert f"The image at {PARAM} could not be fetched" in caught.value.message
    return caught.value.message, caplog.text


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.8.9.10",
        "10.0.0.1",
        "10.255.255.254",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",  # cloud metadata
        "100.64.0.1",  # carrier-grade NAT
        "0.0.0.0",
        "224.0.0.1",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "::ffff:127.0.0.1",  # IPv4-mapped
        "::ffff:169.254.169.254",
        "::127.0.0.1",  # IPv4-compatible
        "2002:7f00:1::",  # 6to4 of 127.0.0.1
        "2002:a00:1::",  # 6to4 of 10.0.0.1
        "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
        "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo of 127.0.0.1
    ],
)
def test_the_guard_refuses_what_is_not_public(address, fetching):
    assert not image_fetch.is_public(ipaddress.ip_address(address))
    assert not image_fetch.address_allowed(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "1.1.1.1", "2001:4860:4860::8888", "::ffff:8.8.8.8", "2002:808:808::"]
)
def test_the_guard_allows_public_addresses(address, fetching):
    assert image_fetch.is_public(ipaddress.ip_address(address))


def test_trusted_networks_are_the_operator_s_choice(fetching):
    fetching.IMAGE_FETCH_PRIVATE_NETWORKS = ["10.1.2.0/24"]
    assert image_fetch.address_allowed(ipaddress.ip_address("10.1.2.3"))
    assert not image_fetch.address_allowed(ipaddress.ip_address("10.1.3.3"))
    assert not image_fetch.address_allowed(ipaddress.ip_address("127.0.0.1"))


def test_a_name_that_resolves_to_loopback_is_refused(fetching, caplog):
    message, logged = refused("http://localhost:9/cat.png", caplog)
    assert "not a public address" in logged and "127.0.0.1" not in message


def test_a_public_name_is_resolved_and_pinned(fetching, monkeypatch):
    """The request goes to the checked address, the name kept for Host and TLS."""

    async def resolved(host, port, allowed):
        assert (host, port) == ("images.example.com", 443)
        return ipaddress.ip_address("93.184.216.34")

    monkeypatch.setattr(image_fetch, "resolve", resolved)

    async def build():
        async with image_fetch.httpx.AsyncClient() as client:
            url = image_fetch.httpx.URL("https://images.example.com/a/cat.png?x=1")
            return await image_fetch.pinned_request(client, url)

    request = asyncio.run(build())
    assert str(request.url) == "https://93.184.216.34/a/cat.png?x=1"
    assert request.headers["host"] == "images.example.com"
    assert request.extensions["sni_hostname"] == "images.example.com"


def test_a_trusted_local_image_is_fetched(fetching, served: ImageServer):
    fetching.IMAGE_FETCH_PRIVATE_NETWORKS = ["127.0.0.1/32"]
    assert fetch(f"{served.url}/image") == IMAGE
    assert fetch(f"{served.url}/chain/3") == IMAGE  # 3 redirects: the most followed


def test_a_redirect_to_loopback_is_refused(fetching, served, first_hop_loopback, caplog):
    message, logged = refused(f"{served.url}/redirect?to={served.url}/image", caplog)
    assert served.paths == [f"/redirect?to={served.url}/image"]  # /image never asked for
    assert [str(a) for a in first_hop_loopback] == ["127.0.0.1", "127.0.0.1"]
    assert "127.0.0.1" in logged and "not a public address" in logged
    assert "127.0.0.1" not in message and "302" not in message


@pytest.mark.parametrize(
    "target", ["http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/", "http://[::1]/"]
)
def test_a_redirect_inside_is_refused(fetching, served, first_hop_loopback, target, caplog):
    message, logged = refused(f"{served.url}/redirect?to={target}", caplog)
    inside = target.split("/")[2].strip("[]")
    assert inside in logged and inside not in message


def test_four_redirects_are_refused(fetching, served, caplog):
    fetching.IMAGE_FETCH_PRIVATE_NETWORKS = ["127.0.0.1/32"]
    _, logged = refused(f"{served.url}/chain/4", caplog)
    assert "more than 3 redirects" in logged
    assert served.paths == ["/chain/4", "/chain/3", "/chain/2", "/chain/1"]


def test_a_trickling_server_is_cut_at_the_overall_deadline(fetching, served, caplog):
    """Every read comes quickly (one byte per 0.2 s, well within a per-read timeout): only the
    total is bounded, by IMAGE_FETCH_TIMEOUT."""
    fetching.IMAGE_FETCH_PRIVATE_NETWORKS = ["127.0.0.1/32"]
    fetching.IMAGE_FETCH_TIMEOUT = 1.5
    started = time.monotonic()
    _, logged = refused(f"{served.url}/trickle", caplog)
    assert time.monotonic() - started < 1.5 + 0.5
    assert "IMAGE_FETCH_TIMEOUT" in logged


def test_what_the_inside_answered_stays_in_the_log(fetching, served, caplog):
    fetching.IMAGE_FETCH_PRIVATE_NETWORKS = ["127.0.0.1/32"]
    message, logged = refused(f"{served.url}/missing", caplog)
    assert "HTTP 404" in logged
    assert "404" not in message and "10.9.8.7" not in message and "127.0.0.1" not in message


def test_the_host_allow_list(fetching, served, caplog):
    fetching.IMAGE_FETCH_PRIVATE_NETWORKS = ["127.0.0.1/32"]
    fetching.IMAGE_FETCH_ALLOWED_HOSTS = ["127.0.0.1", "*.images.example.com"]
    assert fetch(f"{served.url}/image") == IMAGE
    for host in ("cdn.images.example.com", "a.b.images.example.com", "127.0.0.1."):
        assert image_fetch.host_allowed(host)
    for host in ("images.example.com", "evilimages.example.com", "example.com", "localhost"):
        assert not image_fetch.host_allowed(host)
    fetching.IMAGE_FETCH_ALLOWED_HOSTS = ["*.images.example.com"]
    _, logged = refused(f"{served.url}/image", caplog)
    assert "IMAGE_FETCH_ALLOWED_HOSTS" in logged and served.paths == ["/image"]


def test_a_redirect_must_be_allowed_too(fetching, served, caplog):
    fetching.IMAGE_FETCH_PRIVATE_NETWORKS = ["127.0.0.1/32"]
    fetching.IMAGE_FETCH_ALLOWED_HOSTS = ["127.0.0.1"]
    port = served.url.rsplit(":", 1)[1]
    _, logged = refused(f"{served.url}/redirect?to=http://localhost:{port}/image", caplog)
    assert "host localhost is not in IMAGE_FETCH_ALLOWED_HOSTS" in logged


def test_the_size_cap_is_kept(fetching, served):
    fetching.IMAGE_FETCH_PRIVATE_NETWORKS = ["127.0.0.1/32"]
    fetching.IMAGE_MAX_BYTES = len(IMAGE) - 1
    with pytest.raises(APIError, match="larger than this server's limit"):
        fetch(f"{served.url}/image")
