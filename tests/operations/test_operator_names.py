"""`manage.py warm|unload|pool` take the names the API takes: an alias (`gpt-4o-mini`), Ollama's
`x:latest`, resolved as every door resolves them; a refusal is a line of its own (never on
the progress line), in the server's words, with a nonzero exit."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.helpers import ROOT
from tests.support.live_server import ADMIN_TOKEN, LiveServer, live_server


@pytest.fixture(scope="module")
def server(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    aliases = ("--alias", "gpt-4o-mini", "--alias", "hf.co/org/tiny:Q4_K_M")
    gone = shutil.copytree(tiny_dir, tmp_path_factory.mktemp("gone") / "model")
    setup = (
        ("add_model", "tiny", "--local", str(tiny_dir), *aliases),
        ("add_model", "gone", "--local", str(gone)),
    )
    with live_server(tmp_path_factory.mktemp("operator-var"), *setup) as live:
        shutil.rmtree(gone)  # its weights lost after it was added: its load fails
        yield live


def control(server: LiveServer, *args: str) -> subprocess.CompletedProcess:
    """The command's run, its output decoded as written: `\r` kept (text mode would turn it
    into a line break, hiding a progress line an error is written onto)."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args, "--url", server.url, "--token", ADMIN_TOKEN],
        cwd=ROOT,
        capture_output=True,
        timeout=300,
    )
    done.stdout, done.stderr = done.stdout.decode(), done.stderr.decode()
    return done


def test_warm_pool_and_unload_take_an_alias(server):
    warmed = control(server, "warm", "gpt-4o-mini")
    assert warmed.returncode == 0, warmed.stderr
    assert warmed.stdout.startswith("loaded gpt-4o-mini (tiny) in ")
    # The progress line, redrawn with `\r`, is ended before the result is written.
    assert warmed.stderr.startswith("\rwarming gpt-4o-mini… ") and warmed.stderr.endswith("s\n")
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


def test_an_alias_with_slashes_is_warmed_by_its_id(server):
    # `/` cannot travel in a /control URL segment: the command resolves the name first.
    warmed = control(server, "warm", "hf.co/org/tiny:Q4_K_M")
    assert warmed.returncode == 0, warmed.stderr
    assert warmed.stdout.startswith("loaded hf.co/org/tiny:Q4_K_M (tiny) in ")
    unloaded = control(server, "unload", "hf.co/org/tiny:Q4_K_M")
    assert unloaded.stdout.strip() == "unloaded hf.co/org/tiny:Q4_K_M (tiny)"


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
    assert "The server's catalog has no enabled model named 'gpt-nope' (by id or alias)." in warm


def test_a_failed_load_is_said_on_a_line_of_its_own(server):
    refused = control(server, "warm", "gone")
    assert refused.returncode != 0
    progress, error = refused.stderr.rstrip("\n").split("\n")
    assert progress.startswith("\rwarming gone… ")  # once this line was where the error went
    assert error.startswith("CommandError: ") and "(HTTP " in error
