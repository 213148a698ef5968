"""The door (inference/edge/door.py) in front of a real uvicorn: a body over MAX_REQUEST_BODY is
refused before it is read, key or no key, and never reaches the disk; JSON nested too deep is
the endpoint's 400; the admin's GGUF upload keeps its own allowance for staff."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.live_server import LiveServer, live_server, manage

CAP = 2**20  # the server's MAX_REQUEST_BODY
HUGE = 256 * 2**20
CHUNK = 2**16
CONNECTIONS = 8  # the server's SERVER_MAX_CONNECTIONS
PASSWORD = "door-staff-password"
UPLOAD = "/admin/catalog/ggufimport/add/"


@pytest.fixture(scope="module")
def server(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    setup = ("add_model", "tiny", "--local", str(tiny_dir))
    var = tmp_path_factory.mktemp("door")
    limits = {"MAX_REQUEST_BODY": str(CAP), "SERVER_MAX_CONNECTIONS": str(CONNECTIONS)}
    with live_server(var, setup, REQUIRE_API_KEY="true", **limits) as live:
        yield live


@pytest.fixture(scope="module")
def key(server: LiveServer) -> str:
    return server.manage("create_api_key", "door").stdout.strip()


def written(server: LiveServer) -> int:
    """Bytes the server process has passed to write() so far: files and pipes (a temporary
    file included, even one unlinked at once), not its sockets."""
    io = (Path("/proc") / str(server.process.pid) / "io").read_text()
    return int(re.search(r"^wchar: (\d+)$", io, re.M).group(1))


def connect(server: LiveServer, path: str, headers: dict[str, str]) -> socket.socket:
    """A connection that has sent a POST's head, and nothing of its body yet."""
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    return sock


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        piece = sock.recv(65536)
        assert piece, f"the connection closed before a response: {data!r}"
        data += piece
    head, body = data.split(b"\r\n\r\n", 1)
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in header_lines)
    while len(body) < int(headers["content-length"]):
        piece = sock.recv(65536)
        assert piece, "the connection closed mid-body"
        body += piece
    return int(status_line.split()[1]), headers, body


def send_until_refused(sock: socket.socket, total: int) -> int:
    """Sends up to `total` body bytes; returns how many went before the server's end of the
    connection refused them."""
    sent, piece = 0, b"x" * 2**20
    try:
        while sent < total:
            sock.sendall(piece)
            sent += len(piece)
    except OSError:  # reset, broken pipe, or a peer that stopped reading (timeout)
        pass
    return sent


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def assert_openai_error(body: bytes, kind: str = "invalid_request_error") -> dict:
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["type"] == kind
    return error


def assert_anthropic_error(body: bytes, kind: str) -> None:
    answer = json.loads(body)
    assert answer["type"] == "error" and answer["error"]["type"] == kind
    assert answer["error"]["message"]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_a_huge_declared_body_is_refused_unread_before_auth(server, path):
    before = written(server)
    started = time.monotonic()
    # No key: on main the whole body was read to a temporary file first, then came the 401.
    sock = connect(server, path, {"Content-Type": "application/json", "Content-Length": str(HUGE)})
    with sock:
        status, headers, body = read_response(sock)  # answered from the head alone
        took = time.monotonic() - started
        sent = send_until_refused(sock, HUGE)
    assert status == 413 and headers["connection"] == "close"
    if path == "/v1/messages":
        assert_anthropic_error(body, "request_too_large")
    else:
        assert assert_openai_error(body)["code"] == "request_too_large"
    assert took < 2
    assert sent < HUGE // 4  # the server closed the connection instead of reading on
    assert written(server) - before < 2**20


def test_a_huge_chunked_body_is_cut_and_never_written(server):
    before = written(server)
    sock = connect(server, "/v1/chat/completions", {"Transfer-Encoding": "chunked"})
    sent = [0]

    def pour() -> None:
        piece = chunk(b"x" * 2**20)
        try:
            while sent[0] < HUGE:
                sock.sendall(piece)
                sent[0] += 2**20
        except OSError:
            pass

    sender = threading.Thread(target=pour)
    sender.start()
    try:
        status = read_response(sock)[0]
    except OSError:  # the server's close reset the connection before we read its 413
        status = None
    finally:
        sender.join(timeout=30)
        sock.close()
    assert not sender.is_alive()
    assert status in (413, None)
    assert sent[0] < HUGE // 4
    assert written(server) - before < 2**20


def test_a_chunked_body_is_answered_once_it_passes_the_cap(server):
    """The body never ends, yet the 413 comes: the server stopped reading at the cap."""
    sock = connect(server, "/v1/messages", {"Transfer-Encoding": "chunked"})
    with sock:
        for _ in range(CAP // CHUNK):
            sock.sendall(chunk(b"x" * CHUNK))
        sock.sendall(chunk(b"x"))  # one byte past the cap; no last chunk follows
        status, headers, body = read_response(sock)
    assert status == 413 and headers["connection"] == "close"
    assert_anthropic_error(body, "request_too_large")


def chat(server: LiveServer, key: str, **kwargs) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    return httpx.post(f"{server.api}/chat/completions", headers=headers, timeout=60, **kwargs)


SHORT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}


def test_bodies_within_the_cap_pass_declared_or_chunked(server, key):
    assert chat(server, key, json=SHORT).status_code == 200
    padded = {**SHORT, "user": "x" * (CAP - 4096)}  # just under the cap, sent chunked
    answer = chat(server, key, content=iter([json.dumps(padded).encode()]))
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] == 2


DEEP = {
    "arrays": "[" * 100_000,
    "closed arrays": "[" * 100_000 + "]" * 100_000,
    "objects": json.dumps(SHORT)[:-1] + ', "metadata": ' + '{"a":' * 5000 + "1" + "}" * 5001,
}


@pytest.mark.parametrize("text", DEEP.values(), ids=DEEP.keys())
def test_deep_json_is_a_400_in_each_dialect(server, key, text):
    openai = chat(server, key, content=text.encode())
    assert openai.status_code == 400
    assert_openai_error(openai.content)
    headers = {"x-api-key": key, "content-type": "application/json"}
    anthropic = httpx.post(f"{server.api}/messages", headers=headers, content=text.encode())
    assert anthropic.status_code == 400
    assert_anthropic_error(anthropic.content, "invalid_request_error")
    assert chat(server, key, json=SHORT).status_code == 200  # and the server goes on


def test_connections_past_the_limit_get_a_503_until_some_close(server):
    host, port = server.url.removeprefix("http://").split(":")
    idle = [socket.create_connection((host, int(port)), timeout=10) for _ in range(CONNECTIONS)]
    try:
        assert httpx.get(f"{server.url}/health/live", timeout=10).status_code == 503
    finally:
        for sock in idle:
            sock.close()
    time.sleep(0.2)  # the server notices the closes
    assert httpx.get(f"{server.url}/health/live", timeout=10).status_code == 200


@pytest.fixture(scope="module")
def staff(server: LiveServer) -> Iterator[httpx.Client]:
    """A client signed in to the admin as a superuser."""
    env = {**server.env, "DJANGO_SUPERUSER_PASSWORD": PASSWORD}
    manage(env, "createsuperuser", "--noinput", "--username", "staff", "--email", "s@example.com")
    with httpx.Client(base_url=server.url, timeout=60) as client:
        client.get("/admin/login/")
        login = {"username": "staff", "password": PASSWORD, "next": "/admin/"}
        login["csrfmiddlewaretoken"] = client.cookies["csrftoken"]
        assert client.post("/admin/login/", data=login).status_code == 302
        yield client


def gguf_form(client: httpx.Client, model_id: str) -> dict:
    return {"model_id": model_id, "weights": "quantized", "csrfmiddlewaretoken": csrf(client)}


def csrf(client: httpx.Client) -> str:
    client.get(UPLOAD)
    return client.cookies["csrftoken"]


def test_a_staff_gguf_upload_past_the_cap_is_taken(server, staff):
    """Staff get MAX_GGUF_UPLOAD on the admin's upload; the job itself fails later (these are
    not GGUF bytes), which is not what this checks."""
    upload = b"GGUF" + b"\0" * (3 * CAP)
    files = {"upload": ("door.gguf", upload, "application/octet-stream")}
    answer = staff.post(UPLOAD, data=gguf_form(staff, "door-upload"), files=files)
    assert answer.status_code == 302, answer.text[:2000]
    saved = list((Path(server.env["VAR_DIR"]) / "media" / "gguf-uploads").glob("door*.gguf"))
    assert [path.stat().st_size for path in saved] == [len(upload)]


def test_anyone_else_is_held_to_the_cap_on_the_upload_path(server, staff):
    with httpx.Client(base_url=server.url, timeout=60) as stranger:
        stranger.get("/admin/login/")  # a CSRF cookie is free; a staff session is not
        token = stranger.cookies["csrftoken"]
        files = {"upload": ("big.gguf", b"\0" * (2 * CAP), "application/octet-stream")}
        form = {"model_id": "stranger", "csrfmiddlewaretoken": token}
        answer = stranger.post(UPLOAD, data=form, files=files)
    assert answer.status_code == 413
    assert_openai_error(answer.content)
