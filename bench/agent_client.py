"""One streamed request of bench/agent.py, in any dialect both servers speak (chat completions,
Anthropic Messages, Responses): the time to its first token, to its end, the reply's text, and
the prompt and cached tokens the server reported."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import httpx
from peers import DEMO_ID


@dataclass
class Turn:
    seconds: float = 0.0  # the whole streamed request
    ttft: float | None = None  # to the first token; the end when none came
    prompt: int | None = None
    cached: int | None = None
    text: str = ""
    error: str | None = None

    def describe(self) -> str:
        if self.error:
            return self.error
        ttft = f"{self.ttft:.2f}" if self.ttft is not None else "?"
        return f"{self.prompt} tokens, {self.cached} cached, TTFT {ttft} s, {self.seconds:.2f} s"

    @property
    def new_tokens_per_second(self) -> float | None:
        """What the turn read itself (prompt less cache hits) over its time to first token."""
        if self.prompt is None or not self.ttft:
            return None
        return (self.prompt - (self.cached or 0)) / self.ttft

    def replay_cells(self) -> list[str]:
        if self.error:
            return [self.error, "-", "-"]
        speed = self.new_tokens_per_second
        return [
            f"{self.prompt:,} ({self.cached or 0:,})" if self.prompt is not None else "?",
            f"{self.ttft:.2f}" if self.ttft is not None else "?",
            f"{speed:,.0f}" if speed is not None else "?",
        ]


def chat_body(messages: list[dict], max_tokens: int) -> dict:
    return {
        "model": DEMO_ID,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def post(url: str, path: str, body: dict, headers: dict | None = None) -> Turn:
    """`body` streamed to `url + path`, read to its end."""
    turn, started = Turn(), time.perf_counter()
    with httpx.stream("POST", url + path, json=body, headers=headers, timeout=1800) as response:
        if response.status_code != 200:
            turn.error = f"{response.status_code} {response.read()[:200]!r}"
            return turn
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line.removeprefix("data: "))
            text = event_text(event)
            if text:
                turn.ttft = turn.ttft or time.perf_counter() - started
                turn.text += text
            read_usage(turn, event)
    turn.seconds = time.perf_counter() - started
    turn.ttft = turn.ttft or turn.seconds
    return turn


def event_text(event: dict) -> str | None:
    """The text a streamed event adds, or None when it carries none (a chat stream's opening
    chunk is an empty delta sent before the prompt is read)."""
    if "choices" in event:  # chat completions
        delta = (event["choices"] or [{}])[0].get("delta") or {}
        calls = json.dumps(delta["tool_calls"]) if delta.get("tool_calls") else None
        return delta.get("content") or delta.get("reasoning_content") or calls
    kind = event.get("type", "")
    if kind == "content_block_delta":  # Messages
        delta = event["delta"]
        return delta.get("text") or delta.get("thinking") or delta.get("partial_json")
    if kind.startswith("response.") and kind.endswith(".delta"):  # Responses
        return event.get("delta") if isinstance(event.get("delta"), str) else None
    return None


def read_usage(turn: Turn, event: dict) -> None:
    """Prompt and cached tokens from whichever usage the event carries: chat's last chunk
    (and llama-server's timings), Messages' message_start, Responses' final event."""
    usage = (
        event.get("usage")
        or (event.get("message") or {}).get("usage")
        or (event.get("response") or {}).get("usage")
    )
    if usage and "prompt_tokens" in usage:
        turn.prompt = usage["prompt_tokens"]
        turn.cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    elif usage and "cache_read_input_tokens" in usage:
        turn.cached = usage["cache_read_input_tokens"] or 0
        turn.prompt = (usage.get("input_tokens") or 0) + turn.cached
    elif usage and usage.get("input_tokens") is not None:
        turn.prompt = usage["input_tokens"]
        turn.cached = (usage.get("input_tokens_details") or {}).get("cached_tokens")
    timings = event.get("timings") or {}
    if turn.cached is None and "cache_n" in timings:
        turn.cached = timings["cache_n"]
