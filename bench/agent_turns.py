"""Agent turns at cache speed: the recorded 3-turn Claude Code and Codex sessions
(tests/fixtures/agents/) replayed against our server and llama.cpp's llama-server, on the same
GGUF (the demo SmolLM2-135M, its context stretched to 32k so an agent's prompt fits: the
figures are about reading prompts, not about answers), one turn after the other as an agent
sends them. Per turn: the prompt's tokens, the share read from the prefix cache, and the time
to the first streamed token. Then two Claude Code first turns that differ only in the
billing-header line.

    .venv/bin/python bench/agent_turns.py --gguf var/cache/SmolLM2-135M-Instruct.Q4_1.gguf
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from peers import DEMO_ID, ROOT, free_port, llama_server_binary, start_ours, wait_up

FIXTURES = ROOT / "tests/fixtures/agents"
CONTEXT = 32768
MAX_TOKENS = 8  # the turns measure prompt reading; answers are cut short on both servers


def sessions() -> dict[str, list[dict]]:
    out = {}
    for agent in ("claude_code", "codex"):
        requests = json.loads((FIXTURES / f"{agent}.json").read_text())["main"]
        for request in requests:
            body = request["body"]
            body["model"] = DEMO_ID
            body["temperature"] = 0
            body["max_tokens" if agent == "claude_code" else "max_output_tokens"] = MAX_TOKENS
        out[agent] = requests
    return out


def billing_pair(first: dict) -> list[dict]:
    pair = []
    for version in ("2.1.327.101", "2.1.328.850"):
        request = copy.deepcopy(first)
        line = f"x-anthropic-billing-header: cc_version={version}; cc_entrypoint=cli;"
        request["body"]["system"][0]["text"] = line
        pair.append(request)
    return pair


def turn(url: str, request: dict) -> dict:
    """One streamed request: time to the first content event, and the usage it reported."""
    path = request["path"].split("?")[0]
    started = time.monotonic()
    first = None
    events = []
    with httpx.stream("POST", url + path, json=request["body"], timeout=900) as response:
        if response.status_code != 200:
            return {"error": f"{response.status_code} {response.read()[:200]!r}"}
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line.removeprefix("data: "))
            if first is None and "delta" in event.get("type", ""):
                first = time.monotonic() - started
            events.append(event)
    return {"ttft": first, **usage(events)}


def usage(events: list[dict]) -> dict:
    """(prompt tokens, cached) from Messages' message_start or Responses' final event."""
    for event in events:
        if event.get("type") == "message_start":
            found = event["message"]["usage"]
            cached = found.get("cache_read_input_tokens") or 0
            return {"prompt": found["input_tokens"] + cached, "cached": cached}
    final = events[-1].get("response", {}) if events else {}
    found = final.get("usage") or {}
    details = found.get("input_tokens_details") or {}
    return {"prompt": found.get("input_tokens"), "cached": details.get("cached_tokens")}


def start_ours_stretched(gguf: Path, work: Path) -> tuple[subprocess.Popen, str]:
    """Ours on the demo GGUF (peers.start_ours), its catalog context stretched to CONTEXT: the
    model loads on the first request, with the catalog's context then."""
    process, url, _ = start_ours(gguf, work, dict(os.environ))
    stretch = (
        f"from catalog.models import CatalogModel as M; M.objects.update(context_length={CONTEXT})"
    )
    env = {**os.environ, "VAR_DIR": str(work), "DATABASE_URL": f"sqlite:///{work / 'db.sqlite3'}"}
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "shell", "-c", stretch], env=env, check=True
    )
    return process, url


def start_llama(gguf: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    threads = str(len(os.sched_getaffinity(0)))
    command = [str(llama_server_binary()), "-m", str(gguf), "--host", "127.0.0.1"]
    command += ["--port", str(port), "--ctx-size", str(CONTEXT), "--parallel", "1"]
    command += ["--threads", threads, "--no-webui", "--jinja"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_up(url, process, "/health")
    return process, url


def run(name: str, url: str) -> None:
    groups = {**sessions()}
    groups["billing header pair"] = billing_pair(sessions()["claude_code"][0])
    for group, requests in groups.items():
        for number, request in enumerate(requests, 1):
            row = turn(url, request)
            if "error" in row:
                print(f"| {name} | {group} | {number} | {row['error']} | | |", flush=True)
                continue
            share = f"{100 * row['cached'] / row['prompt']:.0f}%" if row["prompt"] else "?"
            ttft = f"{row['ttft']:.2f}" if row["ttft"] is not None else "?"
            print(
                f"| {name} | {group} | {number} | {row['prompt']} | {row['cached']} ({share}) "
                f"| {ttft} |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--gguf", type=Path, default=ROOT / "var/cache/" / ("SmolLM2-135M-Instruct.Q4_1.gguf")
    )
    parser.add_argument("--no-llama-server", action="store_true")
    args = parser.parse_args()
    print("| server | session | turn | prompt tokens | cached | TTFT s |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        process, url = start_ours_stretched(args.gguf, Path(work))
        try:
            run("ours", url)
        finally:
            process.terminate()
            process.wait()
    if not args.no_llama_server:
        process, url = start_llama(args.gguf)
        try:
            run("llama-server", url)
        finally:
            process.terminate()
            process.wait()


if __name__ == "__main__":
    main()
