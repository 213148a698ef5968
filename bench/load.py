"""What the serving benchmark sends: bursts of N streams at once, churn (N clients in a closed
loop, each answer a random length) and a multi-turn chat. Every loop is bounded."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from peers import BENCH_ADMIN_TOKEN  # bench/ is on the path, as for every bench script

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
GREEDY = {"temperature": 0}
# SmolLM2's <|endoftext|> and <|im_end|>: banned in churn so that every server generates the
# drawn length and the work is the same everywhere.
NO_EOS = {"0": -100, "2": -100}
# The code-edit workload's file: a frozen copy of this module (237 lines, ~2.2k tokens).
CODE_EDIT_SOURCE = Path(__file__).parent / "fixtures/code_edit_source.txt"


@dataclass
class Result:
    ttft: float | None = None
    gaps: list[float] = field(default_factory=list)
    tokens: int = 0


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def one_stream(
    client: httpx.AsyncClient,
    url: str,
    model: str,
    messages: list[dict],
    max_tokens: int,
    sampling: dict = GREEDY,
) -> Result:
    body = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        **sampling,
    }
    result, started, last, pieces = Result(), time.perf_counter(), None, 0
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
                pieces += 1
                now = time.perf_counter()
                if result.ttft is None:
                    result.ttft = now - started
                else:
                    result.gaps.append(now - last)
                last = now
    result.tokens = result.tokens or pieces  # a server that reports no usage
    return result


def summarise(outcomes: list, elapsed: float) -> dict:
    results, errors = [], []
    for outcome in outcomes:
        if isinstance(outcome, Result) and outcome.tokens:
            results.append(outcome)
        else:  # a stream that ends without a token failed as surely as one that raised
            errors.append("empty stream" if isinstance(outcome, Result) else outcome)
    tokens = sum(r.tokens for r in results)
    ttfts = [r.ttft for r in results if r.ttft is not None]
    gaps = [g for r in results for g in r.gaps]
    return {
        "tok_s": tokens / elapsed,
        "ttft_p50": percentile(ttfts, 0.5),
        "ttft_p95": percentile(ttfts, 0.95),
        "itl_p50": percentile(gaps, 0.5),
        "itl_p95": percentile(gaps, 0.95),
        "tokens": tokens,
        "streams": len(results),
        "failed": len(errors),
        "first_error": repr(errors[0]) if errors else "",
    }


async def burst(url: str, model: str, concurrency: int, max_tokens: int) -> dict:
    """`concurrency` greedy streams started together."""
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
    return summarise(list(outcomes), elapsed)


async def code_edit(url: str, model: str, streams: int, max_tokens: int, extra: dict) -> dict:
    """`streams` greedy streams asked to return a file of a few hundred lines with one name
    changed: an agent's code edit, whose answer repeats its prompt (what n-gram drafts
    predict). `extra`: body fields a server needs for speculation (none: without)."""
    source = CODE_EDIT_SOURCE.read_text()
    ask = (
        f"Here is a Python file:\n\n```python\n{source}```\n\nRename the function "
        "`percentile` to `quantile` everywhere. Return the whole file, nothing else."
    )
    messages = [{"role": "user", "content": ask}]
    limits = httpx.Limits(max_connections=streams)
    async with httpx.AsyncClient(timeout=1800, limits=limits) as client:
        # The file read once first, on every server: the rows measure the answers' decoding.
        await one_stream(client, url, model, messages, 1)
        started = time.perf_counter()
        outcomes = await asyncio.gather(
            *(
                one_stream(
                    client,
                    url,
                    model,
                    messages,
                    max_tokens,
                    {**GREEDY, **extra},
                )
                for _ in range(streams)
            ),
            return_exceptions=True,
        )
        elapsed = time.perf_counter() - started
    return summarise(list(outcomes), elapsed)


Ask = tuple[list[dict], int, dict]  # messages, max_tokens, sampling


async def closed_loop(
    url: str, model: str, clients: int, seconds: float, asks: Callable[[int], Iterator[Ask]]
) -> dict:
    """`clients` clients, each asking again as soon as its answer ends, for `seconds`;
    `asks(i)` is client i's endless run of requests."""
    deadline = time.perf_counter() + seconds

    async def client_loop(client: httpx.AsyncClient, index: int) -> list:
        outcomes, requests = [], asks(index)
        while time.perf_counter() < deadline:
            messages, length, sampling = next(requests)
            try:
                outcomes.append(await one_stream(client, url, model, messages, length, sampling))
            except (httpx.HTTPError, ValueError) as exc:
                outcomes.append(exc)
        return outcomes

    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(timeout=1800, limits=limits) as client:
        started = time.perf_counter()
        per_client = await asyncio.gather(*(client_loop(client, i) for i in range(clients)))
        elapsed = time.perf_counter() - started
    return summarise([o for outcomes in per_client for o in outcomes], elapsed)


async def churn(
    url: str, model: str, clients: int, seconds: float, sampling: dict, seed: int = 0
) -> dict:
    """Closed loop with answer lengths 16-160 tokens drawn from a seeded generator per client,
    so every server gets the same sequence of requests."""

    def asks(index: int) -> Iterator[Ask]:
        rng = random.Random(seed * 1000 + index)
        while True:
            topic = TOPICS[rng.randrange(len(TOPICS))]
            messages = [{"role": "user", "content": f"Tell me about {topic}."}]
            yield messages, rng.randint(16, 160), sampling

    return await closed_loop(url, model, clients, seconds, asks)


async def multi_turn(url: str, model: str, turns: int = 4) -> dict:
    """A 1,000-token system prompt over four turns: the first prefills it all, the rest reuse."""
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


async def chats(url: str, model: str, clients: int, seconds: float, tokens: int) -> dict:
    """`clients` greedy chats of `tokens` tokens each, in a closed loop."""

    def asks(index: int) -> Iterator[Ask]:
        messages = [{"role": "user", "content": f"Tell me about {TOPICS[index]}."}]
        return itertools.repeat((messages, tokens, GREEDY))

    return await closed_loop(url, model, clients, seconds, asks)


async def running_sequences(client: httpx.AsyncClient, url: str) -> int:
    # /health's counts are for operators: the benchmarks' servers take the shell's admin
    # token, or peers.bench_env's.
    token = os.environ.get("ADMIN_TOKEN") or BENCH_ADMIN_TOKEN
    headers = {"Authorization": f"Bearer {token}"}
    health = (await client.get(f"{url}/health", headers=headers)).json()
    return health["running_sequences"] + health["queued_sequences"]


async def abuse(url: str, model: str, clients: int = 8, seconds: float = 60) -> dict:
    """Normal streams alone, then beside one legacy request of 8 prompts x 2,000 tokens with
    n 8 (64 sequences, 128k prompt tokens) that is abandoned after `seconds`: the normal
    streams' TTFT and inter-token p95 both times, and how long the abandoned sequences took to
    leave the engine."""
    alone = await chats(url, model, clients, seconds, 32)
    body = {
        "model": model,
        "prompt": [f"{TOPICS[i]}: " + "tell me more, " * 500 for i in range(8)],
        "n": 8,
        "max_tokens": 64,
        "stream": True,
    }
    async with httpx.AsyncClient(timeout=600) as client:
        big = asyncio.create_task(client.post(f"{url}/v1/completions", json=body))
        await asyncio.sleep(1)
        beside = await chats(url, model, clients, seconds, 32)
        if big.done():  # refused or failed: the scenario did not run
            response = big.result()
            raise RuntimeError(f"the big request ended early: {response.status_code}")
        big.cancel()
        gone_at = time.perf_counter()
        while await running_sequences(client, url) and time.perf_counter() - gone_at < 120:
            await asyncio.sleep(0.05)
        freed = time.perf_counter() - gone_at
    return {"alone": alone, "beside": beside, "freed_seconds": freed}
