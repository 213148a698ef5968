"""`manage.py warm|unload|pool` take the names the API takes: an alias (`gpt-4o-mini`), Ollama's
`x:latest`, resolved as every door resolves them; a refusal is a line of its own (never on
the progress line), in the server's words, with a nonzero exit."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tests.live_server import ADMIN_TOKEN, LiveServer, live_server


@pytest.fixture(scope="module")
def server(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    setup = ("add_model", "tiny", "--local", str(tiny_dir), "--alias", "gpt-4o-mini")
    with live_server(tmp_path_factory.mktemp("operator-var"), setup) as live:
        yield live


def control(server: LiveServer, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args, "--url", server.url, "--token", ADMIN_TOKEN],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_warm_pool_and_unload_take_an_alias(server):
    warmed = control(server, "warm", "gpt-4o-mini")
    assert warmed.returncode == 0, warmed.stderr
    assert warmed.stdout.startswith("loaded gpt-4o-mini (tiny) in ")
    assert "warming gpt-4o-mini" in warmed.stderr and warmed.stderr.endswith("\n")
    again = control(server, "warm", "tiny:latest")  # Ollama's name for it
    assert again.stdout.startswith("tiny:latest (tiny) was already loaded")
    table = control(server, "pool", "gpt-4o-mini")
    assert table.returncode == 0, table.stderr
    rows = table.stdout.splitlines()
    assert rows[0].split()[:2] == ["model", "memory"] and rows[1].split()[0] == "tiny"
    assert len(rows) == 2  # only that model
    unloaded = control(server, "unload", "gpt-4o-mini")
    assert unloaded.stdout.strip() == "unloaded gpt-4o-mini (tiny)"
    absent = control(server, "pool", "gpt-4o-mini")
    assert absent.stdout.strip() == "gpt-4o-mini (tiny) is not loaded."


def test_an_unknown_name_is_a_line_of_its_own_and_fails(server):
    for args in (("warm", "gpt-nope"), ("unload", "gpt-nope"), ("pool", "gpt-nope")):
        refused = control(server, *args)
        assert refused.returncode != 0, args
        # A log keeps `\r`-redrawn progress on one line: the error starts a line of its own.
        lines = refused.stderr.split("\n")
        (error,) = [line for line in lines if "gpt-nope" in line and "CommandError" in line]
        assert error.startswith("CommandError: "), refused.stderr
        assert "'gpt-nope'" in error
    warm = control(server, "warm", "gpt-nope").stderr
    assert "does not exist or is not enabled on this server. (HTTP 404)" in warm
