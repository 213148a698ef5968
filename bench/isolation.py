"""Isolation benchmark: how one running stream fares beside abusive requests (issue 28).

    .venv/bin/python bench/isolation.py [--root DIR] [--tokens 200] [--json out.json]

Starts the server from --root (default: this checkout) with API keys on, the demo model, a
float32 copy of it (about 500 MiB of weights, not loaded) and TMPDIR pointed at a fresh folder;
then, with one greedy stream of --tokens (end tokens banned) from one key:
- alone: the stream's inter-token gaps, p50, p95 and max;
- n8: the same while another key sends a ~3.5 MiB prompt with n 8 to /v1/chat/completions;
- count_tokens: the same while another key sends a ~700k-token (3.5 MiB) body to
  /v1/messages/count_tokens;
- load: the same while the float32 copy loads (the control API's warm);
for those three, the gaps from the moment the other request is sent until the stream ends (the
stream starts again until the other request is answered and --settle seconds have passed), and
the other request's status and seconds;
- 256MiB: an unauthenticated POST declaring Content-Length 256 MiB whose bytes are streamed
  until the server answers or closes (at most --post-cap seconds): its status, seconds, bytes
  sent before the answer (those the client's socket took), and the most the server's temporary
  files held meanwhile (files in its TMPDIR and deleted ones it holds open there).
Prints one table; --json also writes it. Only HTTP and the checkout's manage.py are used, so an
older checkout (a git worktree with .venv and var/cache linked in) gives the before figures.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import secrets
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from load import NO_EOS, Result, one_stream, percentile
from peers import DEMO_ID, ROOT, ours_env, serve_ours

BIG_ID = "smollm2-135m-float32"
MiB = 1024 * 1024
# "word " is one token to SmolLM2 for five bytes: 3.5 MiB of it is about 734k tokens.
FILLER = "word " * (7 * MiB // 2 // 5)
STREAM_SAMPLING = {"temperature": 0, "logit_bias": NO_EOS}
STREAM_MESSAGES = [{"role": "user", "content": "Write a long story about dragons."}]
Other = dict  # what the other request got: status, seconds, and what else it reports


@dataclass
class Server:
    process: subprocess.Popen
    url: str
    stream_key: str
    other_key: str
    admin_token: str
    tmpdir: Path


def manage(root: Path, env: dict, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(root / "manage.py"), *args], env=env, capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(f"manage.py {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout.strip()


def start_server(root: Path, gguf: Path, workdir: Path) -> Server:
    """peers.start_ours, but from `root`, with keys on, prompt limits at their defaults, the
    float32 copy in the catalog and its own TMPDIR."""
    tmpdir = workdir / "tmp"
    tmpdir.mkdir()
    admin_token = secrets.token_urlsafe(24)
    env = {
        **ours_env(workdir, dict(os.environ)),
        "REQUIRE_API_KEY": "true",
        "ADMIN_TOKEN": admin_token,
        "TMPDIR": str(tmpdir),
    }
    manage(root, env, "migrate", "-v0")
    manage(root, env, "import_gguf", str(gguf), "--id", DEMO_ID)
    manage(root, env, "import_gguf", str(gguf), "--id", BIG_ID, "--weights", "float32")
    keys = [manage(root, env, "create_api_key", name) for name in ("stream", "other")]
    process, url = serve_ours(root, env, "/health")
    return Server(process, url, keys[0], keys[1], admin_token, tmpdir)


def weights_mib(workdir: Path, model_id: str) -> float:
    files = (workdir / "models" / model_id).glob("*.safetensors")
    return sum(f.stat().st_size for f in files) / MiB


# ---------------------------------------------------------------- the stream


def token_times(started: float, result: Result) -> list[float]:
    """When each token came, from one_stream's TTFT and gaps (`started`: just before it)."""
    if result.ttft is None:
        return []
    times = [started + result.ttft]
    for gap in result.gaps:
        times.append(times[-1] + gap)
    return times


def gap_figures(streams: list[list[float]], since: float = 0.0) -> dict:
    """Gaps between a stream's tokens that end after `since`, in milliseconds."""
    gaps = [b - a for times in streams for a, b in itertools.pairwise(times) if b > since]
    return {
        "gaps": len(gaps),
        "gap_p50_ms": percentile(gaps, 0.5) * 1000,
        "gap_p95_ms": percentile(gaps, 0.95) * 1000,
        "gap_max_ms": max(gaps, default=float("nan")) * 1000,
    }


async def stream_beside(
    server: Server, tokens: int, other: Callable[[], Awaitable[Other]] | None, settle: float
) -> dict:
    """One stream of `tokens`, started again while `other` (sent once the stream runs) is
    unanswered or answered less than `settle` seconds ago; the gaps since `other` was sent."""
    streams: list[list[float]] = []
    finished = asyncio.Event()
    headers = {"Authorization": f"Bearer {server.stream_key}"}

    async def streamer(client: httpx.AsyncClient) -> None:
        while True:
            started = time.perf_counter()
            result = await one_stream(
                client, server.url, DEMO_ID, STREAM_MESSAGES, tokens, STREAM_SAMPLING
            )
            streams.append(token_times(started, result))
            if other is None or finished.is_set():
                return

    async with httpx.AsyncClient(timeout=600, headers=headers) as client:
        task = asyncio.create_task(streamer(client))
        if other is None:
            await task
            return {**gap_figures(streams), "streams": len(streams)}
        await asyncio.sleep(1.0)  # past the stream's prompt: it is decoding
        sent = time.perf_counter()
        outcome = await other()
        await asyncio.sleep(settle)
        finished.set()
        await task
    return {**gap_figures(streams, since=sent), "streams": len(streams), **outcome}


async def timed_post(url: str, headers: dict, body: dict) -> Other:
    async with httpx.AsyncClient(timeout=600, headers=headers) as client:
        started = time.perf_counter()
        response = await client.post(url, json=body)
        seconds = time.perf_counter() - started
    outcome = {"status": response.status_code, "seconds": seconds}
    try:
        answer = response.json()
    except ValueError:
        return outcome
    if "input_tokens" in answer:
        outcome["input_tokens"] = answer["input_tokens"]
    elif isinstance(answer.get("error"), dict):
        outcome["error"] = str(answer["error"].get("message", ""))[:120]
    return outcome


def many_copies(server: Server) -> Callable[[], Awaitable[Other]]:
    body = {
        "model": DEMO_ID,
        "messages": [{"role": "user", "content": FILLER}],
        "n": 8,
        "max_tokens": 16,
    }
    headers = {"Authorization": f"Bearer {server.other_key}"}
    return lambda: timed_post(f"{server.url}/v1/chat/completions", headers, body)


def count_tokens(server: Server) -> Callable[[], Awaitable[Other]]:
    body = {"model": DEMO_ID, "messages": [{"role": "user", "content": FILLER}]}
    headers = {"x-api-key": server.other_key, "anthropic-version": "2023-06-01"}
    return lambda: timed_post(f"{server.url}/v1/messages/count_tokens", headers, body)


def model_load(server: Server) -> Callable[[], Awaitable[Other]]:
    headers = {"Authorization": f"Bearer {server.admin_token}"}
    return lambda: timed_post(f"{server.url}/control/models/{BIG_ID}/warm", headers, {})


# ---------------------------------------------------------------- the 256 MiB POST


def held_temp_bytes(tmpdir: Path, pid: int) -> int:
    """Bytes on disk in `tmpdir`: its files, and deleted ones the server holds open there
    (Python's TemporaryFile is unlinked at once), each counted once."""
    seen: dict[tuple[int, int], int] = {}
    for folder, _, names in os.walk(tmpdir):
        for name in names:
            try:
                info = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            seen[(info.st_dev, info.st_ino)] = info.st_blocks * 512
    fds = Path(f"/proc/{pid}/fd")
    for fd in fds.iterdir() if fds.exists() else []:
        try:
            if os.readlink(fd).startswith(str(tmpdir)):
                info = os.stat(fd)
                seen[(info.st_dev, info.st_ino)] = info.st_blocks * 512
        except OSError:
            continue
    return sum(seen.values())


class TempWatch:
    """The most `held_temp_bytes` reached, sampled on a thread until stopped."""

    def __init__(self, tmpdir: Path, pid: int) -> None:
        self.tmpdir, self.pid, self.peak = tmpdir, pid, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, held_temp_bytes(self.tmpdir, self.pid))
            self._stop.wait(0.05)

    def __enter__(self) -> TempWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def send_until_answered(sock: socket.socket, total: int, cap: float) -> tuple[int, float]:
    """Streams up to `total` bytes until the server answers, closes or `cap` passes; the
    bytes the kernel took and the seconds until the answer (or the cap)."""
    chunk, sent, started = b"a" * 65536, 0, time.perf_counter()
    sock.setblocking(False)
    while time.perf_counter() - started < cap:
        readable, writable, _ = select.select([sock], [sock] if sent < total else [], [], 0.2)
        if readable:
            break
        if writable:
            try:
                sent += sock.send(chunk[: total - sent])
            except BlockingIOError:
                continue
            except OSError:  # reset or pipe closed: the server gave up on the body
                break
    return sent, time.perf_counter() - started


def huge_post(server: Server, cap: float, declared: int = 256 * MiB) -> dict:
    """An unauthenticated POST declaring `declared` bytes, streamed until it is answered."""
    host, port = server.url.removeprefix("http://").split(":")
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n"
    ).encode()
    before = held_temp_bytes(server.tmpdir, server.process.pid)
    with TempWatch(server.tmpdir, server.process.pid) as watch:
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(head)
            sent, seconds = send_until_answered(sock, declared, cap)
            sock.settimeout(2)
            try:
                first = sock.recv(4096).split(b"\r\n", 1)[0].decode(errors="replace")
            except OSError as exc:
                first = type(exc).__name__
        time.sleep(1)  # what the server writes after answering counts too
    status = first.split()[1] if first.startswith("HTTP/") else (first or "closed")
    answered = seconds < cap or first.startswith("HTTP/")
    return {
        "status": status if answered else f"none in {cap:.0f}s",
        "seconds": seconds,
        "sent_mib": sent / MiB,
        "temp_mib": max(0, watch.peak - before) / MiB,
    }


# ---------------------------------------------------------------- the report


def checkout_name(root: Path) -> str:
    described = subprocess.run(
        ["git", "-C", str(root), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
    )
    return f"{root} at {described.stdout.strip() or 'unknown commit'}"


def print_table(rows: dict[str, dict]) -> None:
    alone = rows["alone"]
    print(
        f"\n{'scenario':<13}{'gaps':>5}{'p50 ms':>8}{'p95 ms':>8}{'max ms':>8}"
        f"{'p95 x':>7}{'max x':>7}   other request"
    )
    for name, row in rows.items():
        if "gaps" not in row:
            continue
        ratios = f"{row['gap_p95_ms'] / alone['gap_p95_ms']:7.2f}"
        ratios += f"{row['gap_max_ms'] / alone['gap_max_ms']:7.2f}"
        other = ""
        if "status" in row:
            other = f"{row['status']} in {row['seconds']:.2f}s"
            other += f", {row['input_tokens']:,} tokens" if "input_tokens" in row else ""
            other += f" ({row['error'][:60]})" if row.get("error") else ""
        print(
            f"{name:<13}{row['gaps']:5d}{row['gap_p50_ms']:8.0f}{row['gap_p95_ms']:8.0f}"
            f"{row['gap_max_ms']:8.0f}{ratios}   {other}"
        )
    post = rows.get("256MiB")
    if post:
        print(
            f"256 MiB POST without a key: {post['status']} after {post['seconds']:.2f}s, "
            f"{post['sent_mib']:.1f} MiB sent, temporary files grew {post['temp_mib']:.1f} MiB"
        )


def measure(server: Server, args: argparse.Namespace) -> dict[str, dict]:
    """Every scenario in turn, each row printed as it comes."""
    rows: dict[str, dict] = {}
    asyncio.run(stream_beside(server, 8, None, 0))  # warm-up: first compile
    scenarios = {
        "alone": None,
        "n8": many_copies(server),
        "count_tokens": count_tokens(server),
        "load": model_load(server),
    }
    for name, other in scenarios.items():
        rows[name] = asyncio.run(stream_beside(server, args.tokens, other, args.settle))
        print(f"{name}: {json.dumps(rows[name])}", flush=True)
    rows["256MiB"] = huge_post(server, args.post_cap)
    print(f"256MiB: {json.dumps(rows['256MiB'])}", flush=True)
    return rows


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to serve from")
    parser.add_argument(
        "--gguf", type=Path, default=ROOT / "var/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    parser.add_argument("--tokens", type=int, default=200, help="per stream")
    parser.add_argument(
        "--settle", type=float, default=2.0, help="seconds the stream goes on after an answer"
    )
    parser.add_argument("--post-cap", type=float, default=60.0, help="the 256 MiB POST's limit")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    args.root = args.root.resolve()
    if not (args.root / "manage.py").exists():
        parser.error(f"{args.root} has no manage.py")
    if not args.gguf.exists():
        parser.error(f"{args.gguf} is missing: run `make serve` or `make test` once")
    return args


def main() -> None:
    args = parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-isolation-"))
    server = None
    try:
        server = start_server(args.root, args.gguf, workdir)
        print(
            f"server: {checkout_name(args.root)}; {BIG_ID}: "
            f"{weights_mib(workdir, BIG_ID):.0f} MiB of weights",
            flush=True,
        )
        rows = measure(server, args)
        print_table(rows)
        if args.json:
            args.json.write_text(
                json.dumps({"checkout": checkout_name(args.root), "rows": rows}, indent=2)
            )
    finally:
        if server is not None:
            server.process.terminate()
            try:
                server.process.wait(timeout=45)  # it drains running requests for up to 30 s
            except subprocess.TimeoutExpired:
                server.process.kill()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
