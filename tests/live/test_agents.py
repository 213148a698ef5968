"""The real coding agents against a live server: Claude Code (`claude -p`, Anthropic Messages)
and Codex (`codex exec`, OpenAI Responses), pinned and cached by scripts/ensure_agents.sh.

The model is the scripted agent (tests/support/scripted_agent.py): its replies are known, so what is
tested is everything between it and the agent: the agent's real requests (long system prompts,
dozens of tools, cache_control, namespaces, its own headers and fields; see
tests/fixtures/agents/README.md), the streams it reads, and a tool call that the agent runs and
answers. Each agent is configured as a user would, with nothing but the server's address, a
key and a model id.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.agent_cli import ROOT, AgentRun, claude_env, codex_env, ensure_agents, run_agent
from tests.support.live_server import LiveServer, live_server
from tests.support.scripted_agent import CONTEXT, MISSED, ScriptedCall, build_agent_model

# Runs once (SQLite pass): what the agents send and read; the catalog row is only read, so
# PostgreSQL would only repeat it.
pytestmark = pytest.mark.database_independent

HELLO = "hello from the fixture"  # hello.txt's text: the tool result must carry it back
GREETING = "Hello from the scripted agent."
READ_ANSWER = "The file says hello."
FIXTURES = ROOT / "tests/fixtures/agents"
AGENT_TIMEOUT = 90  # seconds, each run; a hung agent fails its test, not the whole suite


@pytest.fixture(scope="session")
def agents_bin() -> Path:
    """The folder with `claude` and `codex` (npm, the first time; cached in ~/.cache)."""
    try:
        return ensure_agents()
    except subprocess.CalledProcessError as failed:
        pytest.fail(f"scripts/ensure_agents.sh failed:\n{failed.stderr[-3000:]}")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The agents' working directory: one file for their tool calls to read."""
    folder = tmp_path_factory.mktemp("agent-project")
    (folder / "hello.txt").write_text(f"{HELLO}\n")
    return folder


@pytest.fixture(scope="module")
def agent_models(
    smollm_dir: Path, project: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """Catalog id -> scripted model: one that answers at once, and one per agent whose first
    reply calls that agent's own tool on hello.txt."""
    root = tmp_path_factory.mktemp("agent-models")
    calls = {
        "agent-plain": None,
        "claude-reader": ScriptedCall("Read", {"file_path": str(project / "hello.txt")}),
        "codex-shell": ScriptedCall("exec_command", {"cmd": "cat hello.txt"}),
    }
    return {
        model_id: build_agent_model(
            smollm_dir,
            root / model_id,
            call,
            GREETING if call is None else READ_ANSWER,
            expect=HELLO,
        )
        for model_id, call in calls.items()
    }


@pytest.fixture(scope="module")
def server(
    agent_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    options = ("--family", "chatml", "--context-length", str(CONTEXT))
    setup = [
        ("add_model", model_id, "--local", str(folder), *options)
        for model_id, folder in agent_models.items()
    ]
    with live_server(tmp_path_factory.mktemp("agents-server"), *setup) as live:
        yield live


def claude(
    agents_bin: Path, server: LiveServer, project: Path, home: Path, model: str, prompt: str
) -> AgentRun:
    env = claude_env(home, server.url, "sk-agents-test", model, model)
    command = [str(agents_bin / "claude"), "-p", prompt]
    return checked_run(server, command, env, project)


def codex(
    agents_bin: Path, server: LiveServer, project: Path, home: Path, model: str, prompt: str
) -> AgentRun:
    env = codex_env(home, server.api, "sk-agents-test", model)
    command = [str(agents_bin / "codex"), "exec", "--skip-git-repo-check", prompt]
    return checked_run(server, command, env, project)


def checked_run(server: LiveServer, command: list[str], env: dict, project: Path) -> AgentRun:
    """Runs the agent; every request it made must have succeeded. Claude Code answers a 400 by
    quietly sending the request again in another shape (system messages folded into the user
    turn, a beta header fewer), so a run that ends well is not enough."""
    start = len(server.output())
    run = run_agent(command, env, project, AGENT_TIMEOUT)
    served = server.output()[start:]
    refused = [line for line in served.splitlines() if re.search(r'" [45]\d\d ', line)]
    assert not refused, f"{refused}\n{run.describe()}\n--- server log\n{served[-6000:]}"
    return run


def check(run: AgentRun, expected: str, server: LiveServer) -> None:
    """The agent ended well and printed `expected`; if not, its output and the server's."""
    log = server.output()[-6000:]
    assert run.returncode == 0, f"{run.describe()}\n--- server log\n{log}"
    assert MISSED not in run.stdout, f"the tool result lacked {HELLO!r}:\n{run.describe()}"
    assert expected in run.stdout, f"{run.describe()}\n--- server log\n{log}"


def test_claude_code_answers(agents_bin, server, project, tmp_path):
    run = claude(agents_bin, server, project, tmp_path, "agent-plain", "Say hi.")
    check(run, GREETING, server)


def test_claude_code_reads_a_file_and_answers(agents_bin, server, project, tmp_path):
    """The model calls Read on hello.txt; Claude Code reads it and sends its text back, and
    only a tool result holding that text makes the model give READ_ANSWER."""
    run = claude(agents_bin, server, project, tmp_path, "claude-reader", "What does hello.txt say?")
    check(run, READ_ANSWER, server)


def test_codex_answers(agents_bin, server, project, tmp_path):
    run = codex(agents_bin, server, project, tmp_path, "agent-plain", "Say hi.")
    check(run, GREETING, server)


def test_codex_runs_a_command_and_answers(agents_bin, server, project, tmp_path):
    """The model calls exec_command with `cat hello.txt`; Codex runs it (in its read-only
    sandbox) and sends the output back, which the model needs to give READ_ANSWER."""
    run = codex(agents_bin, server, project, tmp_path, "codex-shell", "What does hello.txt say?")
    check(run, READ_ANSWER, server)
    assert "cat hello.txt" in run.stderr, run.describe()  # codex exec logs the command it ran


def replay(server: LiveServer, agent: str, turn: int, model: str) -> list[dict]:
    """One recorded request (tests/fixtures/agents/) sent again as the agent sent it, headers
    included, to `model`: the stream's events (their data)."""
    record = json.loads((FIXTURES / f"{agent}.json").read_text())["main"][turn]
    body = {**record["body"], "model": model}
    url, headers = server.url + record["path"], record["headers"]
    with httpx.stream(record["method"], url, json=body, headers=headers, timeout=60) as response:
        text = response.read().decode()
    assert response.status_code == 200, text[-3000:]
    return [
        json.loads(line.removeprefix("data: "))
        for line in text.splitlines()
        if line.startswith("data: {")
    ]


@pytest.mark.parametrize("turn", [0, 1, 2])
def test_recorded_claude_code_requests(server, turn):
    """What Claude Code 2.1.328 sent, turn by turn, without needing npm: the first turn gets
    the Read call, the later ones (whose tool results hold hello.txt's text) the answer."""
    events = replay(server, "claude_code", turn, "claude-reader")
    assert events[-1]["type"] == "message_stop", events[-3:]
    blocks = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    text = "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
    if turn == 0:
        assert [(b["type"], b.get("name")) for b in blocks] == [("tool_use", "Read")]
    else:
        assert text == READ_ANSWER


@pytest.mark.parametrize("turn", [0, 1, 2])
def test_recorded_codex_requests(server, turn):
    """What Codex 0.169.0 sent, turn by turn: exec_command first, then the answer."""
    events = replay(server, "codex", turn, "codex-shell")
    assert events[-1]["type"] == "response.completed", events[-3:]
    items = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    if turn == 0:
        assert [(i["type"], i.get("name")) for i in items] == [("function_call", "exec_command")]
        assert json.loads(items[0]["arguments"]) == {"cmd": "cat hello.txt"}
    else:
        assert [i["type"] for i in items] == ["message"]
        assert items[0]["content"][0]["text"] == READ_ANSWER
