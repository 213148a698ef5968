"""Serving benchmark: our server against mlx_lm.server, same model, same weights, one run.

    .venv/bin/python bench/serving.py [--concurrency 1,8,32] [--max-tokens 64]

Prints raw mlx_lm.stream_generate speed, then for each server and concurrency: aggregate output
tok/s, time to first token (p50/p95), inter-token latency (p50) and peak RSS, then the multi-turn
scenario (1,000-token shared system prompt, 4 turns: cold vs warm TTFT). Loopback only; every
loop is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
DEMO_ID = "smollm2-135m-instruct"
TOPICS = [
    "dragons",
    "the sea",
    "a lighthouse",
    "robots",
    "autumn",
    "a train journey",
    "bees",
    "the moon",
    "a bakery",
    "mountains",
    "a library",
    "rain",
    "chess",
    "a city at night",
    "volcanoes",
    "a garden",
]


@dataclass
class Result:
    ttft: float | None = None
    gaps: list[float] = field(default_factory=list)
    tokens: int = 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def peak_rss_mib(pid: int) -> float | None:
    try:  # Linux; elsewhere the figure is left out
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def one_stream(
    client: httpx.AsyncClient, url: str, model: str, messages: list[dict], max_tokens: int
) -> Result:
    body = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    result, started, last = Result(), time.perf_counter(), None
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                result.tokens = chunk["usage"]["completion_tokens"]
            choices = chunk.get("choices") or []
            if choices and choices[0].get("delta", {}).get("content"):
                now = time.perf_counter()
                if result.ttft is None:
                    result.ttft = now - started
                else:
                    result.gaps.append(now - last)
                last = now
    return result


async def drive(url: str, model: str, concurrency: int, max_tokens: int) -> dict:
    prompts = [
        [{"role": "user", "content": f"Write a long story about {TOPICS[i % len(TOPICS)]}."}]
        for i in range(concurrency)
    ]
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(timeout=1800, limits=limits) as client:
        started = time.perf_counter()
        outcomes = await asyncio.gather(
            *(one_stream(client, url, model, p, max_tokens) for p in prompts),
            return_exceptions=True,
        )
        elapsed = time.perf_counter() - started
    results, errors = [], []
    for outcome in outcomes:
        if isinstance(outcome, Result) and outcome.tokens:
            results.append(outcome)
        else:  # a stream that ends without a token failed as surely as one that raised
            errors.append("empty stream" if isinstance(outcome, Result) else outcome)
    tokens = sum(r.tokens for r in results)
    ttfts = [r.ttft for r in results if r.ttft is not None]
    return {
        "tok_s": tokens / elapsed,
        "ttft_p50": percentile(ttfts, 0.5),
        "ttft_p95": percentile(ttfts, 0.95),
        "itl_p50": percentile([g for r in results for g in r.gaps], 0.5),
        "tokens": tokens,
        "failed": len(errors),
        "first_error": repr(errors[0]) if errors else "",
    }


async def multi_turn(url: str, model: str, turns: int = 4) -> dict:
    system = " ".join(f"Rule {i}: answer politely and mention topic {i}." for i in range(100))
    messages = [{"role": "system", "content": system}]
    ttfts = []
    async with httpx.AsyncClient(timeout=600) as client:
        for turn in range(turns):
            messages.append({"role": "user", "content": f"Question {turn}: name a colour."})
            result = await one_stream(client, url, model, messages, 24)
            ttfts.append(result.ttft)
            reply = await client.post(
                f"{url}/v1/chat/completions",
                json={"model": model, "messages": messages, "max_tokens": 24, "temperature": 0},
            )
            messages.append(
                {"role": "assistant", "content": reply.json()["choices"][0]["message"]["content"]}
            )
    return {"cold_ttft": ttfts[0], "warm_ttft": statistics.mean(ttfts[1:])}


def wait_up(url: str, process: subprocess.Popen, path: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{url} exited with {process.returncode}")
        try:
            if httpx.get(f"{url}{path}", timeout=2).status_code < 500:
                return
        except httpx.TransportError:
            time.sleep(0.3)
    raise SystemExit(f"{url} did not come up")


def start_ours(gguf: Path, workdir: Path, env: dict) -> tuple[subprocess.Popen, str, Path]:
    env = {
        **env,
        "VAR_DIR": str(workdir),
        "DATABASE_URL": f"sqlite:///{workdir / 'db.sqlite3'}",
        "MODEL_STORAGE_DIR": str(workdir / "models"),
        "LOG_LEVEL": "WARNING",
        # Loopback only, like the peers: no key (it defaults to required outside DEBUG).
        "REQUIRE_API_KEY": "false",
    }
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "-v0"], env=env, check=True)
    subprocess.run(
        [*manage, "import_gguf", str(gguf), "--id", DEMO_ID],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    port = free_port()
    process = subprocess.Popen(
        [*manage, "serve", "--port", str(port), "--log-level", "warning"], env=env
    )
    url = f"http://127.0.0.1:{port}"
    wait_up(url, process, "/v1/models")
    return process, url, workdir / "models" / DEMO_ID


def start_peer(model_dir: Path, env: dict) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "mlx_lm.server", "--model", str(model_dir), "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    wait_up(url, process, "/v1/models")
    return process, url


def float32_copy(model_dir: Path, workdir: Path) -> Path:
    """The model dequantized to float32, for giving mlx_lm.server the weights we compute in."""
    import mlx.core as mx
    from mlx_lm import load
    from mlx_lm.utils import dequantize_model, save

    model, tokenizer, config = load(str(model_dir), return_config=True)
    model = dequantize_model(model)
    model.set_dtype(mx.float32)
    config.pop("quantization", None)
    config.pop("quantization_config", None)
    save(workdir / "float32", model_dir, model, tokenizer, config)
    return workdir / "float32"


def start_peer_float32(model_dir: Path, workdir: Path, env: dict) -> tuple[subprocess.Popen, str]:
    """mlx_lm.server on float32 weights with OpenBLAS preloaded: its best case on a CPU."""
    from inference.blas import find_openblas

    library = find_openblas()
    if library is None:
        raise SystemExit("mlx_lm.server-f32 needs OpenBLAS (Debian: libopenblas0-pthread)")
    return start_peer(float32_copy(model_dir, workdir), {**env, "LD_PRELOAD": library})


def raw_stream_generate(model_dir: Path, max_tokens: int) -> float:
    from mlx_lm import load, stream_generate

    model, tokenizer = load(str(model_dir))
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Write a long story about dragons."}],
        add_generation_prompt=True,
    )
    responses = list(stream_generate(model, tokenizer, prompt, max_tokens=max_tokens))
    return responses[-1].generation_tps


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--gguf", type=Path, default=ROOT / "var/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument(
        "--servers",
        default="ours,mlx_lm.server",
        help="which to drive, comma-separated: ours, mlx_lm.server (stock: stored 4-bit weights, "
        "bundled BLAS), mlx_lm.server-f32 (float32 weights, OpenBLAS preloaded)",
    )
    parser.add_argument("--skip-multi-turn", action="store_true")
    return parser.parse_args()


Servers = dict[str, tuple[subprocess.Popen, str, str]]


def start_servers(args: argparse.Namespace, workdir: Path, env: dict, servers: Servers) -> Path:
    """Ours first (it converts the GGUF the peers then load), then the peers asked for; each
    joins `servers` as it starts, so the caller stops them even if a later one fails."""
    wanted = args.servers.split(",")
    ours, ours_url, model_dir = start_ours(args.gguf, workdir, env)
    if "ours" in wanted:
        servers["ours"] = (ours, ours_url, DEMO_ID)
    else:
        ours.terminate()
    if "mlx_lm.server" in wanted:
        peer, peer_url = start_peer(model_dir, env)
        servers["mlx_lm.server"] = (peer, peer_url, str(model_dir))
    if "mlx_lm.server-f32" in wanted:
        peer, peer_url = start_peer_float32(model_dir, workdir, env)
        servers["mlx_lm.server-f32"] = (peer, peer_url, str(workdir / "float32"))
    return model_dir


def measure(name: str, url: str, model: str, args: argparse.Namespace, levels: list[int]):
    """One server's rows, printed as they come; returns {concurrency: row}."""
    rows = {}
    asyncio.run(drive(url, model, 1, 8))  # warm-up: load and first compile
    for level in levels:
        row = rows[level] = asyncio.run(drive(url, model, level, args.max_tokens))
        print(
            f"{name:>14} c={level:<3} {row['tok_s']:6.1f} tok/s  "
            f"TTFT p50 {row['ttft_p50']:6.2f}s p95 {row['ttft_p95']:6.2f}s  "
            f"ITL p50 {row['itl_p50'] * 1000:6.0f}ms  ({row['tokens']} tokens)"
            + (f"  {row['failed']} FAILED: {row['first_error']}" if row["failed"] else ""),
            flush=True,
        )
    if not args.skip_multi_turn:
        turns = asyncio.run(multi_turn(url, model))
        print(
            f"{name:>14} multi-turn: cold TTFT {turns['cold_ttft']:.2f}s, warm TTFT "
            f"{turns['warm_ttft']:.2f}s ({turns['warm_ttft'] / turns['cold_ttft']:.2f}x)"
        )
    return rows


def compare(table: dict, servers: Servers, levels: list[int], raw: float) -> None:
    peers = [name for name in servers if name != "ours"] if "ours" in servers else []
    for peer_name in peers:
        for level in levels:
            ours_row, peer_row = table[("ours", level)], table[(peer_name, level)]
            print(
                f"c={level}: ours/{peer_name} throughput "
                f"{ours_row['tok_s'] / peer_row['tok_s']:.2f}x, TTFT p50 "
                f"{ours_row['ttft_p50']:.2f}s vs {peer_row['ttft_p50']:.2f}s"
            )
    for name in servers:
        ratio = table[(name, levels[0])]["tok_s"] / raw
        print(f"{name} vs raw stream_generate at c={levels[0]}: {ratio:.2f}x")


def main() -> None:
    args = parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="bench-"))
    servers: Servers = {}
    try:
        model_dir = start_servers(args, workdir, dict(os.environ), servers)
        raw = raw_stream_generate(model_dir, args.max_tokens)
        print(f"raw mlx_lm.stream_generate: {raw:.1f} tok/s (single stream)")
        table = {}
        for name, (process, url, model) in servers.items():
            for level, row in measure(name, url, model, args, levels).items():
                table[(name, level)] = row
            rss = peak_rss_mib(process.pid) or float("nan")
            print(f"{name:>14} peak RSS {rss:.0f} MiB", flush=True)
        compare(table, servers, levels, raw)
    finally:
        for process, _, _ in servers.values():
            process.terminate()
            process.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
