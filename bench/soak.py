"""Soak test: our server under a bounded, mixed and partly hostile load; checks it stays healthy.

    .venv/bin/python bench/soak.py [--clients 64] [--duration 180] [--warmup 20] [--max-tokens 48]
        [--seed 0] [--json PATH] [--url URL --admin-token TOKEN [--api-key KEY] [--pid PID]]

Starts our server on the demo model (as bench/serving.py does: a temp var dir, the GGUF imported,
`manage.py serve` on a free loopback port), or soaks a running one given `--url` (loopback only).
`--clients` async clients then loop for `--duration` seconds (the first `--warmup` of them
included), each request picked at random (seeded): streaming and plain chat, legacy completions,
streams abandoned after a few chunks, malformed bodies, unknown and path-like model ids, prompts
far past the context window, a body past the 4 MiB cap. Every request has a deadline and ends in
one counted outcome (HTTP status, disconnected on purpose, error event, no [DONE], transport
error); a 429's Retry-After is honoured. Server RSS is sampled every second (baseline at the end
of warm-up). When the load stops, /control/pool is polled for up to 15 s until no sequence runs.
Prints a report (latency p50/p95 and TTFT per kind, outcomes, RSS, leaked sequences); exits 1 on
any 5xx, a leaked sequence, a dead server, RSS growth of 5% or more, or a small request sent
once the load is over (the server idle) not answered 200.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load import TOPICS, percentile
from peers import DEMO_ID, ROOT, start_ours

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
REQUEST_TIMEOUT = 120.0  # seconds, per request, from send to last byte
DRAIN_SECONDS = 15.0
RSS_GROWTH_LIMIT = 0.05
BODY_CAP = 4 * 1024 * 1024
# (kind, weight): streaming chat is the bread and butter; the hostile kinds are a steady trickle.
KINDS = [
    ("chat_stream", 40),
    ("chat", 12),
    ("completion_stream", 6),
    ("completion", 6),
    ("abandon_stream", 10),
    ("malformed", 10),
    ("unknown_model", 8),
    ("oversized_prompt", 2),
    ("too_large_body", 2),
]
EXPECTED = {
    "chat_stream": "200",
    "chat": "200",
    "completion_stream": "200",
    "completion": "200",
    "abandon_stream": "disconnected",
    "malformed": "400",
    "unknown_model": "404",
    "oversized_prompt": "400",
    "too_large_body": "413",
}
STREAM_KINDS = {"chat_stream", "completion_stream", "abandon_stream"}
TASKS = [
    "Write a short story about {topic}.",
    "Explain {topic} to a child in {n} sentences.",
    "List {n} facts about {topic}.",
    "Write a poem about {topic}.",
    "Describe {topic} as a travel guide would, in {n} sentences.",
    "What would a scientist say about {topic}?",
]
BAD_MODELS = [
    "../etc/passwd",
    "/etc/passwd",
    "../../var/models/" + DEMO_ID,
    "soak-org/no-such-repo",
    "mlx-community/SmolLM2-135M-Instruct-soak-missing",
    "no-such-model",
    DEMO_ID.upper() + "-x",
]
WORDS = ["apple", "river", "stone", "cloud", "lantern", "marble", "violin", "orbit", "harbor"]


@dataclass
class Outcome:
    kind: str
    outcome: str  # "200", "404", ..., "disconnected", "error_event", "no_done", "transport", ...
    detail: str = ""  # the error code, or a short note
    duration: float = 0.0
    ttft: float | None = None
    tokens: int = 0
    started: float = 0.0  # seconds since the load began
    retry_after: float | None = None  # a 429's Retry-After
    body: str = ""  # a 5xx's body


@dataclass
class Soak:
    url: str
    model: str
    clients: int
    duration: float
    warmup: float
    max_tokens: int
    seed: int
    headers: dict
    outcomes: list[Outcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    big_body: bytes = b""


# ---------------------------------------------------------------- requests


def prompt_text(rng: random.Random) -> str:
    text = rng.choice(TASKS).format(topic=rng.choice(TOPICS), n=rng.randint(2, 7))
    return f"{text} (#{rng.randint(0, 10**6)})"  # a unique tail: no whole-prompt cache hits


def chat_body(soak: Soak, rng: random.Random, stream: bool) -> dict:
    messages = [{"role": "user", "content": prompt_text(rng)}]
    if rng.random() < 0.3:
        messages.insert(0, {"role": "system", "content": f"You are a {rng.choice(WORDS)} expert."})
    body = {
        "model": soak.model,
        "messages": messages,
        "max_tokens": vary(rng, soak.max_tokens),
        "temperature": rng.choice([0, 0, 0.7, 1.0]),
        "stream": stream,
    }
    if stream and rng.random() < 0.5:
        body["stream_options"] = {"include_usage": True}
    if rng.random() < 0.3:
        body["seed"] = rng.randint(0, 10**6)
    return body


def completion_body(soak: Soak, rng: random.Random, stream: bool) -> dict:
    return {
        "model": soak.model,
        "prompt": f"Once upon a time, near {rng.choice(TOPICS)}, {rng.choice(WORDS)}",
        "max_tokens": vary(rng, soak.max_tokens),
        "temperature": rng.choice([0, 0.7]),
        "stream": stream,
    }


def vary(rng: random.Random, max_tokens: int) -> int:
    return max(1, rng.randint(int(max_tokens * 0.75), int(max_tokens * 1.25)))


def malformed(soak: Soak, rng: random.Random) -> tuple[str, bytes, str]:
    """(path, raw body, variant): each one a 400 for a server that validates its input."""
    user = [{"role": "user", "content": "hi"}]
    variants = {
        "invalid_json": b'{"model": "' + soak.model.encode() + b'", "messages": [',
        "json_array": json.dumps([{"model": soak.model, "messages": user}]).encode(),
        "messages_int": json.dumps({"model": soak.model, "messages": 5}).encode(),
        "temperature_str": json.dumps(
            {"model": soak.model, "messages": user, "temperature": "hot"}
        ).encode(),
        "max_tokens_negative": json.dumps(
            {"model": soak.model, "messages": user, "max_tokens": -3}
        ).encode(),
        "bad_role": json.dumps({"model": soak.model, "messages": [{"role": "wizard"}]}).encode(),
        "prompt_dict": json.dumps({"model": soak.model, "prompt": {"a": 1}}).encode(),
        "not_utf8": b'{"model": "\xff\xfe", "messages": []}',
    }
    variant = rng.choice(sorted(variants))
    path = "/v1/completions" if variant == "prompt_dict" else "/v1/chat/completions"
    return path, variants[variant], variant


async def run_one(
    soak: Soak, client: httpx.AsyncClient, rng: random.Random, kind: str
) -> tuple[Outcome, float]:
    """One request; returns its outcome and how long to back off (a 429's Retry-After)."""
    result = Outcome(kind, "")
    started = time.perf_counter()
    retry_after = 0.0
    try:
        async with asyncio.timeout(REQUEST_TIMEOUT):
            if kind in ("chat_stream", "abandon_stream"):
                body = chat_body(soak, rng, stream=True)
                abandon_after = rng.randint(1, 5) if kind == "abandon_stream" else None
                retry_after = await stream(
                    soak, client, "/v1/chat/completions", body, result, started, abandon_after
                )
            elif kind == "completion_stream":
                body = completion_body(soak, rng, stream=True)
                retry_after = await stream(
                    soak, client, "/v1/completions", body, result, started, None
                )
            else:
                path, content = "/v1/chat/completions", None
                if kind == "chat":
                    content = json.dumps(chat_body(soak, rng, stream=False)).encode()
                elif kind == "completion":
                    path = "/v1/completions"
                    content = json.dumps(completion_body(soak, rng, stream=False)).encode()
                elif kind == "malformed":
                    path, content, result.detail = malformed(soak, rng)
                elif kind == "unknown_model":
                    body = chat_body(soak, rng, stream=rng.random() < 0.5)
                    body["model"] = rng.choice(BAD_MODELS)
                    content = json.dumps(body).encode()
                elif kind == "oversized_prompt":
                    words = rng.choices(WORDS, k=60_000)  # ~60k+ tokens, the context is 8,192
                    body = chat_body(soak, rng, stream=rng.random() < 0.5)
                    body["messages"] = [{"role": "user", "content": " ".join(words)}]
                    content = json.dumps(body).encode()
                elif kind == "too_large_body":
                    content = soak.big_body
                headers = {**soak.headers, "Content-Type": "application/json"}
                response = await client.post(f"{soak.url}{path}", content=content, headers=headers)
                retry_after = judge(response, result)
                if response.status_code == 200 and "stream" in response.headers.get(
                    "content-type", ""
                ):
                    result.detail = "unexpected stream"
    except TimeoutError:
        result.outcome, result.detail = "timeout", f"no end within {REQUEST_TIMEOUT:.0f}s"
    except httpx.HTTPError as exc:
        result.outcome, result.detail = "transport", f"{type(exc).__name__}: {exc}"[:200]
    result.duration = time.perf_counter() - started
    return result, retry_after


def judge(response: httpx.Response, result: Outcome) -> float:
    """A finished, non-streamed response: status, error code or body check; the back-off."""
    result.outcome = str(response.status_code)
    if response.status_code == 200:
        try:
            data = response.json()
            choices = data["choices"]
            result.tokens = (data.get("usage") or {}).get("completion_tokens", 0)
            if not choices:
                result.detail = "no choices"
        except (ValueError, KeyError, TypeError):
            result.detail = "200 without a completion body"
        return 0.0
    try:
        error = response.json()["error"]
        result.detail = str(error.get("code") or error.get("type") or "")
    except (ValueError, KeyError, TypeError, AttributeError):
        result.detail = "not an OpenAI error object"
    if response.status_code >= 500:
        result.body = response.text[:300]
    if response.status_code == 429:
        result.retry_after = retry_after_seconds(response)
        return result.retry_after
    return 0.0


def retry_after_seconds(response: httpx.Response) -> float:
    try:
        return max(0.0, float(response.headers.get("Retry-After", "1")))
    except ValueError:
        return 1.0  # an HTTP date, or garbage: a second will do


async def stream(
    soak: Soak,
    client: httpx.AsyncClient,
    path: str,
    body: dict,
    result: Outcome,
    started: float,
    abandon_after: int | None,
) -> float:
    async with client.stream(
        "POST", f"{soak.url}{path}", json=body, headers=soak.headers
    ) as response:
        if response.status_code != 200:
            await response.aread()
            return judge(response, result)
        chunks, done, error = 0, False, None
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                done = True
                break
            try:
                chunk = json.loads(payload)
            except ValueError:
                error = error or f"unparsable event: {payload[:80]}"
                continue
            if isinstance(chunk, dict) and chunk.get("error"):
                error = error or str(chunk["error"].get("code") or chunk["error"])[:120]
                continue
            chunks += 1
            if chunk.get("usage"):
                result.tokens = chunk["usage"].get("completion_tokens", 0)
            for choice in chunk.get("choices") or []:
                text = (choice.get("delta") or {}).get("content") or choice.get("text")
                if text and result.ttft is None:
                    result.ttft = time.perf_counter() - started
            if abandon_after is not None and chunks >= abandon_after:
                result.outcome = "disconnected"  # leaving the block closes the connection
                return 0.0
        if error:
            result.outcome, result.detail = "error_event", error
        elif not done:
            result.outcome = "no_done"
        else:
            result.outcome = "200"
            if result.ttft is None:
                result.detail = "no token"
    return 0.0


async def client_loop(soak: Soak, client: httpx.AsyncClient, index: int, t0: float) -> None:
    rng = random.Random(soak.seed * 100_003 + index)
    kinds, weights = zip(*KINDS, strict=True)
    end = t0 + soak.duration
    await asyncio.sleep(rng.random() * min(2.0, soak.duration / 10))  # don't all start at once
    while time.perf_counter() < end:
        kind = rng.choices(kinds, weights)[0]
        at = time.perf_counter() - t0
        result, back_off = await run_one(soak, client, rng, kind)
        result.started = at
        soak.outcomes.append(result)
        if back_off:
            await asyncio.sleep(max(0.0, min(back_off, 5.0, end - time.perf_counter())))


# ---------------------------------------------------------------- RSS and the drain


def rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        return None
    return None


async def sample_rss(pid: int | None, t0: float, samples: list, stop: asyncio.Event) -> None:
    deadline = t0 + 3600  # bounded, whatever happens to the stop signal
    while pid is not None and not stop.is_set() and time.perf_counter() < deadline:
        value = rss_mib(pid)
        if value is not None:
            samples.append((time.perf_counter() - t0, value))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=1.0)


async def poll_drain(soak: Soak, client: httpx.AsyncClient, admin_headers: dict) -> dict:
    """Polls /control/pool (and /health) until no sequence runs, for DRAIN_SECONDS at most."""
    started = time.perf_counter()
    state = {"pool": None, "health": None, "pool_error": "", "health_error": ""}
    while True:
        try:
            response = await client.get(f"{soak.url}/control/pool", headers=admin_headers)
            if response.status_code == 200:
                state["pool"] = response.json()
            else:
                state["pool_error"] = f"HTTP {response.status_code}: {response.text[:120]}"
        except (httpx.HTTPError, ValueError) as exc:
            state["pool_error"] = f"{type(exc).__name__}: {exc}"[:160]
        try:
            response = await client.get(f"{soak.url}/health", headers=admin_headers)
            state["health"] = response.json() if response.status_code == 200 else None
            state["health_error"] = "" if state["health"] else f"HTTP {response.status_code}"
        except (httpx.HTTPError, ValueError) as exc:
            state["health"], state["health_error"] = None, f"{type(exc).__name__}: {exc}"[:160]
        running = running_of(state)
        elapsed = time.perf_counter() - started
        if running == 0 or elapsed >= DRAIN_SECONDS:
            state["running"], state["seconds"] = running, round(elapsed, 2)
            return state
        await asyncio.sleep(0.5)


def running_of(state: dict) -> int | None:
    if state["pool"] is not None:
        return int(state["pool"].get("running_sequences", 0))
    if state["health"] is not None:
        return int(state["health"].get("running_sequences", 0))
    return None


async def probe(soak: Soak, client: httpx.AsyncClient) -> dict:
    """One small chat request: primes the model before the load, checks it serves after."""
    started = time.perf_counter()
    body = {
        "model": soak.model,
        "messages": [{"role": "user", "content": "Say hi."}],
        "max_tokens": 4,
    }
    try:
        async with asyncio.timeout(REQUEST_TIMEOUT):
            response = await client.post(
                f"{soak.url}/v1/chat/completions", json=body, headers=soak.headers
            )
        status, detail = response.status_code, "" if response.is_success else response.text
    except (TimeoutError, httpx.HTTPError) as exc:
        status, detail = type(exc).__name__, str(exc)
    return {
        "status": status,
        "seconds": round(time.perf_counter() - started, 2),
        "detail": detail[:300],
    }


async def soak_run(soak: Soak, pid: int | None, admin_token: str) -> dict:
    limits = httpx.Limits(max_connections=soak.clients + 8, max_keepalive_connections=soak.clients)
    timeout = httpx.Timeout(REQUEST_TIMEOUT, connect=10)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        # One request first, outside the figures: the model loads (and compiles) on first use.
        prime = await probe(soak, client)
        if prime["status"] != 200:
            soak.notes.append(f"the priming request got {prime['status']}: {prime['detail']}")

        samples: list[tuple[float, float]] = []
        stop = asyncio.Event()
        t0 = time.perf_counter()
        sampler = asyncio.create_task(sample_rss(pid, t0, samples, stop))
        tasks = [asyncio.create_task(client_loop(soak, client, i, t0)) for i in range(soak.clients)]
        # Requests still running at the end finish (each has its deadline); then no waiting.
        _, pending = await asyncio.wait(tasks, timeout=soak.duration + REQUEST_TIMEOUT + 10)
        for task in pending:
            task.cancel()
        if pending:
            soak.notes.append(f"{len(pending)} clients were still busy past every deadline")
            await asyncio.gather(*pending, return_exceptions=True)
        for task in tasks:
            if not task.cancelled() and task.exception() is not None:
                soak.notes.append(f"a client crashed: {task.exception()!r}")
        load_seconds = time.perf_counter() - t0
        end_of_load_rss = rss_mib(pid) if pid else None
        admin_headers = {"Authorization": f"Bearer {admin_token}"} if admin_token else {}
        drain = await poll_drain(soak, client, admin_headers)
        # Idle now: a small request must be served (leaked queue slots would refuse it).
        after = await probe(soak, client)
        stop.set()
        await sampler
        final_rss = rss_mib(pid) if pid else None
        if final_rss is not None:
            samples.append((time.perf_counter() - t0, final_rss))
    return {
        "prime": prime,
        "after": after,
        "load_seconds": load_seconds,
        "samples": samples,
        "end_of_load_rss": end_of_load_rss,
        "drain": drain,
    }


# ---------------------------------------------------------------- the report


def rss_figures(samples: list[tuple[float, float]], warmup: float) -> dict:
    if not samples:
        return {}
    after = [value for at, value in samples if at >= warmup] or [samples[-1][1]]
    baseline, end = after[0], samples[-1][1]
    return {
        "start_mib": round(samples[0][1], 1),
        "baseline_mib": round(baseline, 1),
        "max_after_warmup_mib": round(max(after), 1),
        "end_mib": round(end, 1),
        "growth": (end - baseline) / baseline,
        "samples": len(samples),
        "timeline_mib": [[round(at, 1), round(value, 1)] for at, value in samples],
    }


def kind_row(kind: str, results: list) -> dict:
    durations = [r.duration for r in results]
    ttfts = [r.ttft for r in results if r.ttft is not None]
    details = Counter(f"{r.outcome} {r.detail}".strip() for r in results)
    unexpected = Counter(
        f"{r.outcome} {r.detail}".strip()
        for r in results
        if r.outcome not in (EXPECTED[kind], "429")
        or (kind == "oversized_prompt" and r.detail != "context_length_exceeded")
    )
    return {
        "requests": len(results),
        "outcomes": dict(Counter(r.outcome for r in results).most_common()),
        "details": dict(details.most_common()),
        "unexpected": dict(unexpected.most_common()),
        "p50_s": percentile(durations, 0.5),
        "p95_s": percentile(durations, 0.95),
        "ttft_p50_s": percentile(ttfts, 0.5) if ttfts else None,
        "ttft_p95_s": percentile(ttfts, 0.95) if ttfts else None,
    }


def per_kind_rows(outcomes: list) -> dict:
    by_kind = defaultdict(list)
    for result in outcomes:
        by_kind[result.kind].append(result)
    return {kind: kind_row(kind, by_kind.get(kind, [])) for kind, _ in KINDS}


def failures_of(server_errors: int, run: dict, alive: bool, rss: dict | None) -> list[str]:
    """Why the soak fails; empty when it passes."""
    leaked = run["drain"]["running"]
    failures = []
    if server_errors:
        failures.append(f"{server_errors} responses were 5xx")
    if leaked is None:
        failures.append("could not read running sequences after the load")
    elif leaked:
        failures.append(f"{leaked} sequences still running {DRAIN_SECONDS:.0f}s after the load")
    if not alive:
        failures.append("the server died")
    if run["after"]["status"] != 200:
        failures.append(f"a small request after the load got {run['after']['status']}")
    if rss and rss["growth"] >= RSS_GROWTH_LIMIT:
        failures.append(f"RSS grew {rss['growth']:.1%} after warm-up")
    return failures


def soak_config(soak: Soak) -> dict:
    return {
        "url": soak.url,
        "model": soak.model,
        "clients": soak.clients,
        "duration_s": soak.duration,
        "warmup_s": soak.warmup,
        "max_tokens": soak.max_tokens,
        "seed": soak.seed,
        "request_timeout_s": REQUEST_TIMEOUT,
    }


def summarise(soak: Soak, run: dict, alive: bool, log_summary: dict) -> dict:
    outcomes = soak.outcomes
    totals = Counter(r.outcome for r in outcomes)
    server_errors = sum(n for key, n in totals.items() if key.isdigit() and int(key) >= 500)
    rss = rss_figures(run["samples"], soak.warmup)
    drain = run["drain"]
    failures = failures_of(server_errors, run, alive, rss)
    return {
        "config": soak_config(soak),
        "prime": run["prime"],
        "probe_after_load": run["after"],
        "load_seconds": round(run["load_seconds"], 2),
        "requests": len(outcomes),
        "requests_per_second": len(outcomes) / run["load_seconds"],
        "completion_tokens_reported": sum(r.tokens for r in outcomes),
        "outcomes": dict(totals.most_common()),
        "rate_limited": totals.get("429", 0),
        "retry_after_s": sorted(
            Counter(r.retry_after for r in outcomes if r.retry_after is not None).items()
        ),
        "server_error_samples": list(dict.fromkeys(r.body for r in outcomes if r.body))[:3],
        "server_errors": server_errors,
        "per_kind": per_kind_rows(outcomes),
        "rss": rss,
        "end_of_load_rss_mib": run["end_of_load_rss"],
        "drain": {"leaked_sequences": drain["running"]}
        | {k: drain[k] for k in ("seconds", "pool", "pool_error", "health", "health_error")},
        "server_alive": alive,
        "server_log": log_summary,
        "notes": soak.notes,
        "failures": failures,
        "passed": not failures,
    }


def seconds(value: float | None) -> str:
    return "    -  " if value is None or value != value else f"{value:6.2f}s"


def print_header(summary: dict) -> None:
    config = summary["config"]
    print(
        f"\nsoak: {config['clients']} clients, {config['duration_s']:.0f}s of load "
        f"({config['warmup_s']:.0f}s warm-up), max_tokens ~{config['max_tokens']}, "
        f"seed {config['seed']}, {config['url']}"
    )
    print(
        f"priming request: {summary['prime']['status']} in {summary['prime']['seconds']:.1f}s; "
        f"load ran {summary['load_seconds']:.1f}s: {summary['requests']} requests "
        f"({summary['requests_per_second']:.1f}/s), {summary['completion_tokens_reported']} "
        "completion tokens reported by usage"
    )
    print("outcomes: " + ", ".join(f"{k} x{n}" for k, n in summary["outcomes"].items()))
    if summary["retry_after_s"]:
        values = ", ".join(f"{v:g}s x{n}" for v, n in summary["retry_after_s"])
        print(f"429 Retry-After values: {values}")
    for body in summary["server_error_samples"]:
        print(f"5xx body: {body}")


def print_kinds(per_kind: dict) -> None:
    print(f"\n{'kind':<18}{'n':>6}  {'p50':>7} {'p95':>7}  {'TTFT50':>7} {'TTFT95':>7}  outcomes")
    for kind, row in per_kind.items():
        outcomes = ", ".join(f"{k} x{n}" for k, n in row["outcomes"].items())
        print(
            f"{kind:<18}{row['requests']:>6}  {seconds(row['p50_s'])} {seconds(row['p95_s'])}  "
            f"{seconds(row['ttft_p50_s'])} {seconds(row['ttft_p95_s'])}  {outcomes}"
        )
    unexpected = {k: r["unexpected"] for k, r in per_kind.items() if r["unexpected"]}
    if unexpected:
        print("\nunexpected outcomes (kind: outcome detail x count):")
        for kind, found in unexpected.items():
            for what, n in list(found.items())[:6]:
                print(f"  {kind}: {what} x{n}")


def print_rss(rss: dict | None) -> None:
    if not rss:
        print("\nRSS: not measured (no server pid)")
        return
    print(
        f"\nRSS: start {rss['start_mib']:.0f} MiB, baseline (end of warm-up) "
        f"{rss['baseline_mib']:.0f} MiB, max after warm-up {rss['max_after_warmup_mib']:.0f} "
        f"MiB, end {rss['end_mib']:.0f} MiB: growth {rss['growth']:+.1%} "
        f"({rss['samples']} samples)"
    )


def print_drain(drain: dict) -> None:
    models = (drain["pool"] or {}).get("models", [])
    per_model = "; ".join(
        f"{m['id']}: {m.get('active_sequences')} active, {m.get('queued_sequences')} queued"
        for m in models
    )
    print(
        f"after the load: running_sequences {drain['leaked_sequences']} after "
        f"{drain['seconds']:.1f}s"
        + (f" ({per_model})" if per_model else "")
        + (f"; /control/pool: {drain['pool_error']}" if drain["pool"] is None else "")
        + (
            f"; /health running_sequences {drain['health'].get('running_sequences')}"
            if drain["health"]
            else f"; /health: {drain['health_error']}"
        )
    )


def print_server(summary: dict) -> None:
    after = summary["probe_after_load"]
    print(
        f"small request after the load: {after['status']} in {after['seconds']:.1f}s"
        + (f" ({after['detail'][:160]})" if after["detail"] else "")
    )
    print(f"server alive: {summary['server_alive']}")
    log = summary["server_log"]
    if log:
        print(
            f"server log: {log['lines']} lines, {log['errors']} ERROR, {log['tracebacks']} "
            f"tracebacks, {log['warnings']} WARNING"
        )
        for line in log["samples"]:
            print(f"  | {line}")


def print_report(summary: dict) -> None:
    print_header(summary)
    print_kinds(summary["per_kind"])
    print_rss(summary["rss"])
    print_drain(summary["drain"])
    print_server(summary)
    for note in summary["notes"]:
        print(f"note: {note}")
    if summary["passed"]:
        print("\nPASS")
    else:
        print("\nFAIL: " + "; ".join(summary["failures"]))


def scan_log(path: Path | None) -> dict:
    if path is None or not path.exists():
        return {}
    lines = path.read_text(errors="replace").splitlines()
    interesting = [
        line
        for line in lines
        if ("ERROR" in line or "Traceback" in line or "Error:" in line or "CRITICAL" in line)
    ]
    samples, seen = [], set()
    for line in interesting:
        key = line[:100]
        if key not in seen and len(samples) < 8:
            seen.add(key)
            samples.append(line[:240])
    return {
        "path": str(path),
        "lines": len(lines),
        "errors": sum("ERROR" in line for line in lines),
        "tracebacks": sum("Traceback" in line for line in lines),
        "warnings": sum("WARNING" in line for line in lines),
        "samples": samples,
    }


# ---------------------------------------------------------------- main


def start_server(gguf: Path, workdir: Path, admin_token: str, log_path: Path):
    """start_ours with the soak's settings; the server's output goes to log_path, not here."""
    env = {**os.environ, "REQUIRE_API_KEY": "false", "ADMIN_TOKEN": admin_token}
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:  # the children inherit the log as stdout and stderr
            return start_ours(gguf, workdir, env)
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def stop_server(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=45)  # the server drains running requests for up to 30 s
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--duration", type=float, default=180, help="seconds of load in all")
    parser.add_argument(
        "--warmup", type=float, default=20, help="seconds of load before the RSS baseline"
    )
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the summary here")
    parser.add_argument(
        "--gguf", type=Path, default=ROOT / "var/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    parser.add_argument("--url", help="soak this running server instead (loopback only)")
    parser.add_argument("--admin-token", default="", help="with --url: for /control/pool")
    parser.add_argument("--api-key", default="", help="with --url: sent as a bearer token")
    parser.add_argument("--model", default=DEMO_ID, help="with --url: the catalog id to use")
    parser.add_argument("--pid", type=int, help="with --url: the server's pid, for RSS")
    parser.add_argument(
        "--server-log", type=Path, help="copy of the started server's output (default: temp dir)"
    )
    args = parser.parse_args()
    if args.clients < 1 or args.duration <= 0 or not 0 <= args.warmup < args.duration:
        parser.error("need --clients >= 1 and 0 <= --warmup < --duration")
    if args.duration > 24 * 3600:
        parser.error("--duration is capped at a day")
    if args.url and urlsplit(args.url).hostname not in LOOPBACK:
        parser.error("--url must be a loopback address (127.0.0.1, localhost, ::1)")
    if not args.url and not args.gguf.exists():
        parser.error(f"{args.gguf} is missing: run `make serve` or `make test` once")
    return args


@dataclass
class Target:
    """The server under load: given with --url, or started here (then stopped here too)."""

    url: str
    pid: int | None
    admin_token: str
    model: str
    headers: dict
    process: subprocess.Popen | None = None
    workdir: Path | None = None
    log_path: Path | None = None

    def alive(self, run: dict) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        return run["drain"]["health"] is not None


def given_target(args: argparse.Namespace) -> Target:
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    return Target(args.url.rstrip("/"), args.pid, args.admin_token, args.model, headers)


def started_target(args: argparse.Namespace) -> Target:
    workdir = Path(tempfile.mkdtemp(prefix="soak-"))
    admin_token = secrets.token_urlsafe(24)
    log_path = args.server_log or workdir / "server.log"
    target = Target("", None, admin_token, DEMO_ID, {}, workdir=workdir, log_path=log_path)
    print("starting the server (migrate, import the GGUF, serve)...", flush=True)
    try:
        target.process, target.url, _ = start_server(args.gguf, workdir, admin_token, log_path)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    target.pid = target.process.pid
    print(f"server up at {target.url} (pid {target.pid})", flush=True)
    return target


def make_soak(args: argparse.Namespace, target: Target) -> Soak:
    soak = Soak(
        url=target.url,
        model=target.model,
        clients=args.clients,
        duration=args.duration,
        warmup=args.warmup,
        max_tokens=args.max_tokens,
        seed=args.seed,
        headers=target.headers,
    )
    filler = b"x" * (BODY_CAP + 1024 * 1024)  # a 5 MiB body, one past the 4 MiB cap
    opening = b'{"model": "' + target.model.encode() + b'", "messages": [{"role": "user", '
    soak.big_body = opening + b'"content": "' + filler + b'"}]}'
    return soak


def main() -> int:
    args = parse_args()
    target = given_target(args) if args.url else started_target(args)
    try:
        soak = make_soak(args, target)
        print(
            f"soaking: {args.clients} clients for {args.duration:.0f}s "
            f"(RSS baseline at {args.warmup:.0f}s)...",
            flush=True,
        )
        run = asyncio.run(soak_run(soak, target.pid, target.admin_token))
        summary = summarise(soak, run, target.alive(run), scan_log(target.log_path))
        print_report(summary)
        if args.json:
            args.json.write_text(json.dumps(summary, indent=2, default=str))
            print(f"summary written to {args.json}")
        return 0 if summary["passed"] else 1
    finally:
        if target.process is not None:
            stop_server(target.process)
        if target.workdir is not None:
            shutil.rmtree(target.workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
