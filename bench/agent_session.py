"""The scripted Claude Code session bench/agent.py replays: the recorded first request of
Claude Code 2.1.328 (tests/fixtures/agents/claude_code.json: its several-thousand-token system
prompt, the billing-header line as its first block, its dozen tools with JSON schemas), then
turns of tool calls on this repository, as the agent sends them: each request is the last one
plus an assistant `tool_use` and the user's `tool_result`. Results vary in size like a real
session's: listings, searches and test output of a few hundred tokens, file reads of ~2k.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests/fixtures/agents/claude_code.json"
PROJECT = "/work/project"  # the working directory the recorded environment names
BILLING = "x-anthropic-billing-header: cc_version=2.1.328.850; cc_entrypoint=cli;"
TASK = (
    "Find where the engine decides how much of a new request's prompt it can take from the "
    "prefix cache, and explain what a follow-up turn still has to read."
)
READ_CHARS = 7000  # a file read cut here: about 2k tokens of code
SEARCH_LINES = 40


def listing(folder: str) -> str:
    """`ls -la`-like lines of a folder of this repository."""
    rows = []
    for path in sorted((ROOT / folder).iterdir()):
        if path.name.startswith(".") or path.name == "__pycache__":
            continue
        size = path.stat().st_size if path.is_file() else 4096
        kind = "d" if path.is_dir() else "-"
        rows.append(f"{kind}rw-r--r-- 1 user user {size:>7} {path.name}")
    return "\n".join(rows)


def read(path: str) -> str:
    """Claude Code's Read result: numbered lines, cut at READ_CHARS."""
    lines = (ROOT / path).read_text().splitlines()
    text = "\n".join(f"{number}\t{line}" for number, line in enumerate(lines, 1))
    return text[:READ_CHARS]


def search(pattern: str, folder: str) -> str:
    """`grep -rn pattern folder`, the first SEARCH_LINES matches."""
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(pattern, line):
                found.append(f"{path.relative_to(ROOT)}:{number}:{line.strip()}")
    return "\n".join(found[:SEARCH_LINES])


def test_run(path: str) -> str:
    """pytest -v output naming the tests of one file, every one passed."""
    names = re.findall(r"^(?:async )?def (test_\w+)", (ROOT / path).read_text(), re.M)
    lines = [f"{path}::{name} PASSED" for name in names]
    return "\n".join([*lines, f"{len(names)} passed in 4.21s"])


def edited(path: str) -> str:
    return (
        f"The file {PROJECT}/{path} has been updated. Here's the result of running `cat -n`:\n"
        + (read(path)[:600])
    )


# (what the assistant says, the tool, its input, the result): cycled through as turns go on.
Step = tuple[str, str, dict, Callable[[], str]]
STEPS: list[Step] = [
    ("look at the engine", "Bash", {"command": "ls -la inference/engine"},
     lambda: listing("inference/engine")),
    ("search for the prefix cache", "Bash", {"command": "grep -rn prefix inference/engine"},
     lambda: search("prefix", "inference/engine")),
    ("read the batching code", "Read", {"file_path": f"{PROJECT}/inference/engine/batching.py"},
     lambda: read("inference/engine/batching.py")),
    ("read the prefix cache", "Read", {"file_path": f"{PROJECT}/inference/engine/prefixes.py"},
     lambda: read("inference/engine/prefixes.py")),
    ("run the engine tests", "Bash", {"command": "pytest -v tests/engine/test_scheduling.py"},
     lambda: test_run("tests/engine/test_scheduling.py")),
    ("read the prefill", "Read", {"file_path": f"{PROJECT}/inference/engine/prefill.py"},
     lambda: read("inference/engine/prefill.py")),
    ("note the finding", "Edit",
     {"file_path": f"{PROJECT}/inference/engine/types.py", "old_string": "x", "new_string": "y"},
     lambda: edited("inference/engine/types.py")),
    ("read the worker", "Read", {"file_path": f"{PROJECT}/inference/engine/worker.py"},
     lambda: read("inference/engine/worker.py")),
]  # fmt: skip


def first_request(model: str, max_tokens: int) -> dict:
    """The recorded first request with our task, the billing header, a short answer."""
    body = json.loads(FIXTURE.read_text())["main"][0]["body"]
    body.update(model=model, max_tokens=max_tokens, temperature=0, stream=True)
    body["system"][0]["text"] = BILLING
    body["messages"][0]["content"][-1]["text"] = TASK
    return body


def exchange(number: int, step: Step) -> list[dict]:
    """The assistant's tool call and the user's tool result of turn `number`."""
    saying, tool, arguments, result = step
    call_id = f"toolu_{number:02d}"
    call = {"type": "tool_use", "id": call_id, "name": tool, "input": arguments}
    answer = {"type": "tool_result", "tool_use_id": call_id, "content": result()}
    return [
        {"role": "assistant", "content": [{"type": "text", "text": f"I'll {saying}."}, call]},
        {"role": "user", "content": [answer]},
    ]


def session(turns: int, model: str, max_tokens: int) -> list[tuple[str, dict]]:
    """`turns` requests as Claude Code sends them, each named by what it adds; the latest
    message alone carries the cache_control mark, as Claude Code moves it along."""
    body = first_request(model, max_tokens)
    out = [("task + system + tools", copy.deepcopy(body))]
    for number in range(1, turns):
        step = STEPS[(number - 1) % len(STEPS)]
        for message in body["messages"]:
            for block in message["content"]:
                block.pop("cache_control", None)
        body["messages"] += exchange(number, step)
        body["messages"][-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
        out.append((f"{step[1]}: {step[0]}", copy.deepcopy(body)))
    return out
