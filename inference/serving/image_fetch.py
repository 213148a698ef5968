"""Fetching a remote image a client named (IMAGE_FETCH_REMOTE): without letting the client
reach, through this server, what only the server can reach.

Every hop (the URL, then each redirect, at most MAX_REDIRECTS, followed here rather than by
httpx) is checked the same way: an http(s) URL, its host in IMAGE_FETCH_ALLOWED_HOSTS when that
is set, and every address the host resolves to public (`is_public`: `is_global`, and no
loopback or private IPv4 hidden in an IPv4-mapped, IPv4-compatible, 6to4, Teredo or NAT64
IPv6 address), or inside IMAGE_FETCH_PRIVATE_NETWORKS, networks the operator trusts. The
connection then goes to exactly that checked address (the URL's host swapped for it, the name
kept in the Host header and as the TLS server name, whose certificate is still verified), so a
second DNS answer cannot switch it to another (DNS rebinding). IMAGE_FETCH_TIMEOUT bounds the
whole fetch (resolving, connecting, every read, every redirect), the body is capped at
IMAGE_MAX_BYTES. Whatever goes wrong, the caller is told only that the image could not be
fetched; the address, status or reason goes to the log (what the inside network answered is
nobody's business outside).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Callable

import httpx
from django.conf import settings

log = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_REDIRECTS = 3
REDIRECTS = (301, 302, 303, 307, 308)
# IPv6 ranges whose last 32 bits are an IPv4 address some hosts reach (IPv4-compatible, NAT64).
_V4_TAILS = (ipaddress.ip_network("::/96"), ipaddress.ip_network("64:ff9b::/96"))


class FetchRefused(Exception):
    """Why a fetch was refused or failed: for the log only."""


class TooLarge(Exception):
    """The body went past IMAGE_MAX_BYTES."""


def _embedded_v4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]  # the client's address, where packets end up
    if any(address in network for network in _V4_TAILS):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def is_public(address: IPAddress) -> bool:
    """Whether an address is on the public internet, and not a private one in disguise."""
    if not address.is_global or address.is_multicast:
        return False
    if isinstance(address, ipaddress.IPv6Address):
        inner = _embedded_v4(address)
        return inner is None or is_public(inner)
    return True


def address_allowed(address: IPAddress) -> bool:
    """Public, or in a network the operator named in IMAGE_FETCH_PRIVATE_NETWORKS."""
    if is_public(address):
        return True
    trusted = (ipaddress.ip_network(n, strict=False) for n in settings.IMAGE_FETCH_PRIVATE_NETWORKS)
    return any(address.version == n.version and address in n for n in trusted)


def host_allowed(host: str) -> bool:
    """Whether IMAGE_FETCH_ALLOWED_HOSTS (empty: any host) names this host: exactly, or as
    "*.example.com" (its subdomains, not example.com itself)."""
    allowed = [name.lower().rstrip(".") for name in settings.IMAGE_FETCH_ALLOWED_HOSTS]
    if not allowed:
        return True
    host = host.lower().rstrip(".")
    return any(
        host.endswith(name[1:]) if name.startswith("*.") else host == name for name in allowed
    )


async def resolve(host: str, port: int, allowed: Callable[[IPAddress], bool]) -> IPAddress:
    """The address to connect to: every address the host has must be allowed (a name with a
    public and a private one is refused: which one a client would reach is not ours to pick)."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise FetchRefused(f"{host} does not resolve: {exc}") from None
    # A scoped IPv6 address ("fe80::1%eth0") is link-local whatever its scope.
    addresses = [ipaddress.ip_address(str(info[4][0]).partition("%")[0]) for info in infos]
    refused = [a for a in addresses if not allowed(a)]
    if not addresses or refused:
        raise FetchRefused(f"{host} resolves to {refused or 'nothing'}: not a public address")
    return addresses[0]


async def pinned_request(client: httpx.AsyncClient, url: httpx.URL) -> httpx.Request:
    """A GET for `url` that connects to the host's checked address and to no other."""
    if url.scheme not in ("http", "https") or not url.raw_host:
        raise FetchRefused(f"{url} is not an http(s) URL")
    host = url.raw_host.decode("ascii")  # IDNA-encoded: what DNS and TLS see
    if not host_allowed(host):
        raise FetchRefused(f"host {host} is not in IMAGE_FETCH_ALLOWED_HOSTS")
    port = url.port or (443 if url.scheme == "https" else 80)
    address = await resolve(host.strip("[]"), port, address_allowed)
    # httpx verifies the certificate against sni_hostname: the name, not the address.
    extensions = {"sni_hostname": host} if url.scheme == "https" else {}
    return client.build_request(
        "GET",
        url.copy_with(host=str(address)),
        headers={"Host": url.netloc.decode("ascii")},
        extensions=extensions,
    )


async def fetch(url: str) -> bytes:
    """The body at `url`, fetched under the rules above; FetchRefused (its reason for the log)
    or TooLarge."""
    try:
        async with asyncio.timeout(settings.IMAGE_FETCH_TIMEOUT):
            return await _follow(httpx.URL(url))
    except TimeoutError:
        raise FetchRefused(
            f"not done within IMAGE_FETCH_TIMEOUT ({settings.IMAGE_FETCH_TIMEOUT} s)"
        ) from None
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
        raise FetchRefused(f"{type(exc).__name__}: {exc}") from None


async def _follow(url: httpx.URL) -> bytes:
    # trust_env off: a proxy from the environment would connect where it likes.
    async with httpx.AsyncClient(trust_env=False, timeout=settings.IMAGE_FETCH_TIMEOUT) as client:
        for _ in range(MAX_REDIRECTS + 1):
            response = await client.send(await pinned_request(client, url), stream=True)
            try:
                if response.status_code in REDIRECTS and "location" in response.headers:
                    url = url.join(response.headers["location"])
                    continue
                if response.status_code != 200:
                    raise FetchRefused(f"HTTP {response.status_code} from {url}")
                return await _capped(response)
            finally:
                await response.aclose()
    raise FetchRefused(f"more than {MAX_REDIRECTS} redirects")


async def _capped(response: httpx.Response) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body.extend(chunk)
        if len(body) > settings.IMAGE_MAX_BYTES:
            raise TooLarge
    return bytes(body)
