"""Interactive chat streams alone, and beside a Batch API batch running at batch priority.

    .venv/bin/python bench/batch_priority.py [--clients 4] [--seconds 60] [--lines 500] \
        [--line-tokens 128] [--tokens 64] [--interactive-load]

Our server on the demo GGUF (bench/peers.py: its own catalog and var/ in a temporary folder,
no key). Phases, each `--seconds` of `--clients` greedy chat streams in a closed loop
(bench/load.py: tokens/s, TTFT p50/p95, inter-token p95):
- alone: nothing else runs;
- beside a batch: `--lines` chat lines uploaded with the official SDK (files.create, purpose
  batch) and run by batches.create on /v1/chat/completions (each `--line-tokens` greedy tokens,
  end tokens banned); the phase starts once the batch is in progress with lines in the engine,
  and the batch is cancelled after it (lines done during the phase: its rate);
- alone again, so that the machine's drift shows;
- with --interactive-load: beside the same work at interactive priority instead (as many
  closed-loop clients as the batch runner runs lines, BATCH_CONCURRENCY), which is what the
  batch would cost the streams without its priority.
Prints each phase as it comes, then the ratios of the batch phase to the mean of the two alone.
The server takes the shell's environment: ENGINE_BATCH_SLOTS=0, 1, 2... (batch rows beside
interactive ones) and BATCH_CONCURRENCY (lines a batch runs at once) are what to vary.
Loopback only; every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from load import NO_EOS, chats
from openai import OpenAI
from peers import DEMO_ID, ROOT, start_ours, stop

BATCH_ENDED = {"completed", "failed", "cancelled", "expired"}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--gguf", type=Path, default=ROOT / "var/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    parser.add_argument("--clients", type=int, default=4, help="interactive chat streams")
    parser.add_argument("--seconds", type=float, default=60, help="per phase")
    parser.add_argument("--tokens", type=int, default=64, help="per interactive answer")
    parser.add_argument("--lines", type=int, default=500, help="chat lines in the batch")
    parser.add_argument("--line-tokens", type=int, default=128, help="per batch line")
    parser.add_argument(
        "--interactive-load",
        action="store_true",
        help="also run the streams beside the same work at interactive priority",
    )
    return parser.parse_args()


def batch_input(lines: int, tokens: int) -> bytes:
    """OpenAI's batch input: one request a line, each its own custom_id."""
    rows = []
    for i in range(lines):
        body = {
            "model": DEMO_ID,
            "messages": [{"role": "user", "content": f"Write item {i} of a long list of facts."}],
            "max_tokens": tokens,
            "temperature": 0,
            "logit_bias": NO_EOS,
        }
        rows.append(
            {
                "custom_id": f"line-{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": body,
            }
        )
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def batch_rows(url: str) -> tuple[float, float]:
    """The engine's batch-priority sequences now: (running, queued), from /metrics."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("inference_batch_requests_running", "inference_batch_requests_queued"):
            values[name] = float(value)
    return values["inference_batch_requests_running"], values["inference_batch_requests_queued"]


def start_batch(client: OpenAI, url: str, lines: int, tokens: int):
    """The batch created and in progress, with lines in the engine (bounded wait)."""
    upload = ("lines.jsonl", io.BytesIO(batch_input(lines, tokens)), "application/jsonl")
    file = client.files.create(file=upload, purpose="batch")
    batch = client.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        batch = client.batches.retrieve(batch.id)
        if batch.status in BATCH_ENDED:
            raise SystemExit(f"the batch ended before the phase: {batch.status} {batch.errors}")
        if batch.status == "in_progress" and sum(batch_rows(url)) > 0:
            return batch
        time.sleep(0.2)
    raise SystemExit("the batch did not start within 300 s")


def end_batch(client: OpenAI, batch_id: str) -> object:
    client.batches.cancel(batch_id)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        batch = client.batches.retrieve(batch_id)
        if batch.status in BATCH_ENDED:
            return batch
        time.sleep(0.2)
    raise SystemExit("the batch did not end within 300 s of its cancel")


def show(phase: str, row: dict, extra: str = "") -> None:
    print(
        f"{phase:<22} {row['tok_s']:7.1f} tok/s  TTFT p50 {row['ttft_p50']:6.3f}s "
        f"p95 {row['ttft_p95']:6.3f}s  ITL p50 {row['itl_p50'] * 1000:4.0f}ms "
        f"p95 {row['itl_p95'] * 1000:4.0f}ms  "
        f"({row['tokens']} tokens, {row['streams']} streams"
        + (f", {row['failed']} FAILED: {row['first_error']}" if row["failed"] else "")
        + f"){extra}",
        flush=True,
    )


def beside_batch(url: str, args: argparse.Namespace) -> dict:
    client = OpenAI(base_url=f"{url}/v1", api_key="none", timeout=120, max_retries=0)
    batch = start_batch(client, url, args.lines, args.line_tokens)
    done_before = batch.request_counts.completed if batch.request_counts else 0
    rows = []

    async def streams_and_rows() -> dict:
        async def sample() -> None:
            while True:
                rows.append(await asyncio.to_thread(batch_rows, url))
                await asyncio.sleep(1)

        sampler = asyncio.create_task(sample())
        try:
            return await chats(url, DEMO_ID, args.clients, args.seconds, args.tokens)
        finally:
            sampler.cancel()

    row = asyncio.run(streams_and_rows())
    batch = client.batches.retrieve(batch.id)
    done = (batch.request_counts.completed if batch.request_counts else 0) - done_before
    ended = end_batch(client, batch.id)
    running = statistics.mean(r[0] for r in rows) if rows else float("nan")
    queued = statistics.mean(r[1] for r in rows) if rows else float("nan")
    show(
        "beside the batch",
        row,
        f"; batch: {done} lines done in the phase ({done / args.seconds:.2f}/s), "
        f"{running:.1f} rows running and {queued:.1f} queued on average, then {ended.status}",
    )
    return row


def beside_interactive(url: str, args: argparse.Namespace, clients: int) -> dict:
    async def both() -> dict:
        load = asyncio.create_task(chats(url, DEMO_ID, clients, args.seconds + 5, args.line_tokens))
        await asyncio.sleep(2)  # the load's streams are running
        row = await chats(url, DEMO_ID, args.clients, args.seconds, args.tokens)
        await load
        return row

    row = asyncio.run(both())
    show("beside interactive load", row, f" ({clients} more clients at interactive priority)")
    return row


def ratios(name: str, row: dict, alone: list[dict]) -> None:
    def base(key: str) -> float:
        return statistics.mean(r[key] for r in alone)

    print(
        f"{name}: tok/s x{row['tok_s'] / base('tok_s'):.3f}, "
        f"TTFT p50 x{row['ttft_p50'] / base('ttft_p50'):.2f}, "
        f"TTFT p95 x{row['ttft_p95'] / base('ttft_p95'):.2f}, "
        f"ITL p95 x{row['itl_p95'] / base('itl_p95'):.2f} (against the mean of the alone phases)"
    )


def main() -> None:
    args = parse_args()
    concurrency = int(os.environ.get("BATCH_CONCURRENCY", "4"))
    with tempfile.TemporaryDirectory(prefix="batch-priority-") as workdir:
        process, url, _ = start_ours(args.gguf, Path(workdir), dict(os.environ))
        try:
            asyncio.run(chats(url, DEMO_ID, args.clients, 3, 8))  # load and first compile
            alone = [asyncio.run(chats(url, DEMO_ID, args.clients, args.seconds, args.tokens))]
            show("alone", alone[0])
            beside = beside_batch(url, args)
            alone.append(asyncio.run(chats(url, DEMO_ID, args.clients, args.seconds, args.tokens)))
            show("alone again", alone[1])
            print(f"\nc={args.clients} interactive streams of {args.tokens} tokens:")
            ratios("beside a batch", beside, alone)
            if args.interactive_load:
                ratios("beside interactive load", beside_interactive(url, args, concurrency), alone)
        finally:
            stop(process)


if __name__ == "__main__":
    main()
