"""Running the real coding agents (Claude Code, Codex) against a server: where they are, and the
environment each needs. Used by tests/live/test_agents.py and scripts/record_agents.py.

The agents get a clean environment (no keys or settings of whoever runs the tests), HOME in a
temporary folder, and their own network traffic (telemetry, update checks) off: the only
server they talk to is the one under test.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def ensure_agents() -> Path:
    """The folder holding `claude` and `codex`, as scripts/ensure_agents.sh pins and caches
    them; raises CalledProcessError (with npm's output) when they cannot be installed."""
    script = ROOT / "scripts" / "ensure_agents.sh"
    done = subprocess.run(["sh", str(script)], check=True, capture_output=True, text=True)
    return Path(done.stdout.strip().splitlines()[-1])


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),  # codex's launcher needs node
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "TMPDIR": str(home / "tmp"),
    }
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    return {**env, **extra}


def claude_env(home: Path, base_url: str, key: str, model: str, small: str) -> dict[str, str]:
    """Claude Code pointed at a server (its root: it adds /v1/messages), for both its main
    and its small ("haiku") model."""
    return clean_env(
        home,
        ANTHROPIC_BASE_URL=base_url,
        ANTHROPIC_AUTH_TOKEN=key,
        ANTHROPIC_MODEL=model,
        ANTHROPIC_SMALL_FAST_MODEL=small,
        ANTHROPIC_DEFAULT_HAIKU_MODEL=small,
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_TELEMETRY="1",
        DISABLE_ERROR_REPORTING="1",
    )


def codex_env(home: Path, api_url: str, key: str, model: str) -> dict[str, str]:
    """Codex with a CODEX_HOME whose config.toml names the server (`api_url` ends in /v1:
    Codex appends /responses) as its only model provider, the key in MLX_API_KEY."""
    codex = home / ".codex"
    codex.mkdir(parents=True, exist_ok=True)
    (codex / "config.toml").write_text(
        f'model = "{model}"\nmodel_provider = "mlx"\n\n[model_providers.mlx]\n'
        f'name = "MLX server"\nbase_url = "{api_url}"\nenv_key = "MLX_API_KEY"\n'
        'wire_api = "responses"\n'
    )
    return clean_env(home, CODEX_HOME=str(codex), MLX_API_KEY=key)


@dataclass(frozen=True)
class AgentRun:
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        return (
            f"exit {self.returncode} after {self.seconds:.1f} s\n--- stdout\n{self.stdout[-3000:]}"
            f"\n--- stderr\n{self.stderr[-3000:]}"
        )


def run_agent(command: list[str], env: dict[str, str], cwd: Path, timeout: float) -> AgentRun:
    """Runs an agent to its end; one still running after `timeout` seconds is killed and
    reported as exit -9 with what it had printed."""
    started = time.monotonic()
    try:
        done = subprocess.run(
            command,
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,  # codex exec reads a prompt from a piped stdin
        )
    except subprocess.TimeoutExpired as expired:
        out, err = (_text(s) for s in (expired.output, expired.stderr))
        return AgentRun(-9, out, f"{err}\n(killed after {timeout} s)", time.monotonic() - started)
    return AgentRun(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


def _text(output: bytes | str | None) -> str:
    # TimeoutExpired carries bytes even from a text-mode run.
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""
