"""bench/agent.py --recorded: the recorded 3-turn Claude Code and Codex sessions
(tests/fixtures/agents/) replayed one turn after the other as the agents sent them (answers cut
at MAX_TOKENS), then two Claude Code first turns that differ only in the billing-header line.
Per turn: the prompt's tokens, the share read from the prefix cache, the time to the first
streamed token."""

from __future__ import annotations

import copy
import json

from agent_client import post
from peers import DEMO_ID, ROOT

FIXTURES = ROOT / "tests/fixtures/agents"
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


def recorded(urls: dict[str, str]) -> None:
    """Every group on every server, a table row per turn as it comes."""
    print("\nRecorded agent sessions:\n")
    print("| server | session | turn | prompt tokens | cached | TTFT s |")
    print("|---|---|---|---|---|---|")
    for name, url in urls.items():
        groups = sessions()
        groups["billing header pair"] = billing_pair(sessions()["claude_code"][0])
        for group, requests in groups.items():
            for number, request in enumerate(requests, 1):
                turn = post(url, request["path"].split("?")[0], request["body"])
                if turn.error:
                    print(f"| {name} | {group} | {number} | {turn.error} | | |", flush=True)
                    continue
                share = f"{100 * (turn.cached or 0) / turn.prompt:.0f}%" if turn.prompt else "?"
                print(
                    f"| {name} | {group} | {number} | {turn.prompt} | {turn.cached} ({share}) "
                    f"| {turn.ttft:.2f} |",
                    flush=True,
                )
