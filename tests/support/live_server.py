"""A real `manage.py serve` (uvicorn) on a free loopback port with its own var/ and database."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

import anthropic
import httpx
import openai
import pytest

from config.secrets import create_private_file, private_dir

ROOT = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "e2e-admin-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LiveServer:
    url: str  # the server's root; the API is under /v1
    process: subprocess.Popen
    env: dict
    log: Path

    @property
    def api(self) -> str:
        return f"{self.url}/v1"

    @property
    def admin_headers(self) -> dict:
        return {"Authorization": f"Bearer {ADMIN_TOKEN}"}

    def manage(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return manage(self.env, *args, check=check)

    def output(self) -> str:
        return self.log.read_text()

    def openai(self, api_key: str = "unused", timeout: float = 120) -> openai.OpenAI:
        """The official OpenAI SDK on this server: no retries, so a failure shows as it is."""
        return openai.OpenAI(base_url=self.api, api_key=api_key, max_retries=0, timeout=timeout)

    def anthropic(self, api_key: str = "unused", timeout: float = 120) -> anthropic.Anthropic:
        """The official Anthropic SDK on this server, likewise."""
        return anthropic.Anthropic(
            base_url=self.url, api_key=api_key, max_retries=0, timeout=timeout
        )

    def health(self, timeout: float = 5) -> dict:
        """/health's details, which only an operator sees (the admin token)."""
        return httpx.get(f"{self.url}/health", headers=self.admin_headers, timeout=timeout).json()

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"server exited with {self.process.returncode}:\n{self.output()}")
            try:
                if httpx.get(f"{self.url}/health/ready", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        pytest.fail(f"server was not ready in {timeout:.0f} s:\n{self.output()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"server ignored signal {sig} for {timeout} s:\n{self.output()}")


def _python(env: dict, argv: list[str], what: str, check: bool) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if check and done.returncode:
        pytest.fail(f"{what} failed:\n{done.stdout}\n{done.stderr}")
    return done


def manage(env: dict, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _python(env, ["manage.py", *args], f"manage.py {' '.join(args)}", check)


def on_postgres() -> bool:
    from django.conf import settings

    return settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"


def _postgres(sql: str) -> dict:
    """Runs `sql` on the PostgreSQL server the suite runs on; returns its connection settings."""
    import psycopg
    from django.conf import settings

    db = settings.DATABASES["default"]
    server = {key: db[key.upper()] or None for key in ("user", "password", "host", "port")}
    with psycopg.connect(dbname="postgres", autocommit=True, **server) as conn:
        conn.execute(sql)
    return server


def fresh_postgres_url(template: str | None = None) -> str:
    """A new database on the suite's PostgreSQL server, for one live server: empty, or a copy
    of the `template` database."""
    name = f"live_{secrets.token_hex(6)}"
    copy = f' TEMPLATE "{template}"' if template else ""
    server = _postgres(f'CREATE DATABASE "{name}"{copy}')
    user, password = (quote(str(server[key] or ""), safe="") for key in ("user", "password"))
    login = f"{user}:{password}" if password else user
    host = quote(str(server["host"] or "localhost"), safe="")
    port = f":{server['port']}" if server["port"] else ""
    return f"postgres://{login}@{host}{port}/{name}"


def drop_database(url: str) -> None:
    if url.startswith("postgres://"):
        _postgres(f'DROP DATABASE IF EXISTS "{urlsplit(url).path[1:]}" WITH (FORCE)')


def server_env(var: Path, **settings: str) -> dict:
    """A server's environment: its own var/ and database (SQLite, or PostgreSQL like the suite)."""
    if "DATABASE_URL" in settings:
        database = settings["DATABASE_URL"]
    elif on_postgres():
        database = fresh_postgres_url()
    else:
        database = f"sqlite:///{var / 'db.sqlite3'}"
    return {
        **os.environ,
        "VAR_DIR": str(var),
        "DATABASE_URL": database,
        "MODEL_STORAGE_DIR": str(var / "models"),
        "PYTHONUNBUFFERED": "1",
        "ADMIN_TOKEN": ADMIN_TOKEN,
        "REQUIRE_API_KEY": "false",
        **settings,
    }


# The schema migrated once per run and copied into each server's fresh database (~3 s a server
# saved): SQLite file or PostgreSQL database -> its template.
_templates: dict[str, str] = {}


def _migrated_template() -> str:
    """The run's migrated template for the suite's database engine, made on first use."""
    kind = "postgres" if on_postgres() else "sqlite"
    if kind not in _templates:
        folder = Path(tempfile.mkdtemp(prefix="live-template-"))
        url = fresh_postgres_url() if kind == "postgres" else f"sqlite:///{folder / 'db.sqlite3'}"
        manage(server_env(folder / "var", DATABASE_URL=url), "migrate", "--noinput", "-v0")
        _templates[kind] = url
    return _templates[kind]


def _copy_of_template(var: Path) -> str:
    """A server's fresh database, a copy of the migrated template (what `migrate` would make
    of an empty one): its URL."""
    template = _migrated_template()
    if template.startswith("postgres://"):
        return fresh_postgres_url(template=urlsplit(template).path[1:])
    private_dir(var)
    path = var / "db.sqlite3"
    create_private_file(path)  # owner-only, as the server would make it
    source, copy = sqlite3.connect(template.removeprefix("sqlite:///")), sqlite3.connect(path)
    try:
        source.backup(copy)
    finally:
        source.close()
        copy.close()
    return f"sqlite:///{path}"


def drop_templates() -> None:
    """The run's template databases, at its end."""
    for url in _templates.values():
        drop_database(url)
        if url.startswith("sqlite:///"):
            shutil.rmtree(Path(url.removeprefix("sqlite:///")).parent, ignore_errors=True)
    _templates.clear()


def run_setup(env: dict, setup: tuple) -> None:
    """Each `setup` manage.py command, in order, in one process (tests/support/manage_many.py)."""
    if setup:
        argv = ["-m", "tests.support.manage_many", json.dumps([list(c) for c in setup])]
        _python(env, argv, f"setup {setup}", check=True)


@contextmanager
def _prepared(var: Path, setup: tuple, settings: dict) -> Iterator[tuple[dict, list]]:
    """A server's environment, its fresh database migrated (a copy of the run's template unless
    the caller names a database of its own) and each `setup` manage.py command run; the
    processes the caller starts (added to the list) are killed on the way out, and the copy
    dropped."""
    own_database = "DATABASE_URL" in settings
    copied = {} if own_database else {"DATABASE_URL": _copy_of_template(var)}
    env = server_env(var, **settings, **copied)
    processes: list[subprocess.Popen] = []
    try:
        if own_database:
            manage(env, "migrate", "--noinput", "-v0")
        run_setup(env, setup)
        yield env, processes
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        if not own_database:
            drop_database(env["DATABASE_URL"])


def _spawn(argv: list[str], env: dict, log: Path) -> subprocess.Popen:
    """`manage.py argv` in the background, its output in `log`."""
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "manage.py", *argv],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


@contextmanager
def live_server(var: Path, *setup: tuple[str, ...], **settings: str) -> Iterator[LiveServer]:
    """Migrates a fresh database, runs each `setup` manage.py command, serves until exit."""
    with _prepared(var, setup, settings) as (env, processes):
        port, log = free_port(), var / "server.log"
        processes.append(_spawn(["serve", "--port", str(port)], env, log))
        server = LiveServer(f"http://127.0.0.1:{port}", processes[0], env, log)
        server.wait_ready()
        yield server


@contextmanager
def demo_server(demo_gguf: Path, var: Path) -> Iterator[LiveServer]:
    """The real SmolLM2 imported and served as deployed: API keys required."""
    from tests.support.helpers import DEMO_ID

    setup = ("import_gguf", str(demo_gguf), "--id", DEMO_ID)
    with live_server(var, setup, REQUIRE_API_KEY="true") as server:
        yield server


@dataclass
class Group:
    """A 2-rank MLX group on loopback (ring backend): rank 0 is `leader`, serving HTTP."""

    leader: LiveServer
    followers: list[subprocess.Popen]
    follower_logs: list[Path]


def ring_hostfile(path: Path, ranks: int) -> Path:
    """What mlx.launch writes for `--backend ring` on one host: one address per rank."""
    path.write_text(json.dumps([[f"127.0.0.1:{free_port()}"] for _ in range(ranks)]))
    return path


@contextmanager
def group_server(
    var: Path,
    *setup: tuple[str, ...],
    ranks: int = 2,
    follower_settings: dict | None = None,
    wait_ready: bool = True,
    **settings: str,
):
    """As live_server, but rank 0 of an MLX ring group whose other ranks run
    `manage.py serve --follower`: the environment mlx.launch would give each process (plus
    `follower_settings` on the other ranks), DISTRIBUTED_SECRET one fresh secret for all."""
    settings = {"DISTRIBUTED_SECRET": secrets.token_hex(16), **settings}
    with _prepared(var, setup, settings) as (env, processes):
        hostfile = ring_hostfile(var / "hosts.json", ranks)
        port = free_port()
        logs = [var / f"rank{rank}.log" for rank in range(ranks)]
        for rank in range(ranks):
            argv = ["serve", "--port", str(port)] if rank == 0 else ["serve", "--follower"]
            rank_env = {**env, "MLX_RANK": str(rank), "MLX_HOSTFILE": str(hostfile)}
            if rank:
                rank_env |= follower_settings or {}
            processes.append(_spawn(argv, rank_env, logs[rank]))
        leader = LiveServer(f"http://127.0.0.1:{port}", processes[0], env, logs[0])
        if wait_ready:  # not where the group is meant to fail
            leader.wait_ready(timeout=120)
        yield Group(leader, processes[1:], logs[1:])
