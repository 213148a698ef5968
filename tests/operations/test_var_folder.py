"""`make serve` on a fresh clone says nothing about var/: the Makefile, the demo model's fetch
and the settings make it (and what they make in it) owner-only. A folder someone else left
open is still said, once: by the command that starts or checks the server, not by each step
`make serve` runs before it (migrate, import_gguf, add_model), which said it four times."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

from tests.support.helpers import ROOT, fresh_env, mode
from tests.support.live_server import live_server, manage

pytestmark = pytest.mark.database_independent


def said(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in (done.stdout + done.stderr).splitlines() if "files.W001" in line]


def fetch_script():
    spec = importlib.util.spec_from_file_location(
        "fetch_demo_model", ROOT / "scripts/fetch_demo_model.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_make_and_the_demo_fetch_make_var_owner_only(tmp_path: Path) -> None:
    var_dir = tmp_path / "var"
    made = subprocess.run(
        ["make", "-s", f"VAR={var_dir}", str(var_dir)], cwd=ROOT, capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    assert mode(var_dir) == 0o700
    # The fetch runs before any Python of the server: it makes var/ and var/cache itself.
    other = tmp_path / "elsewhere" / "var"
    fetch_script().private_dirs(other / "cache")
    assert (mode(other.parent), mode(other), mode(other / "cache")) == (0o700, 0o700, 0o700)


def test_a_fresh_var_says_nothing_in_make_serves_steps(tmp_path: Path) -> None:
    var_dir = tmp_path / "var"
    env = fresh_env(var_dir)
    for step in (("migrate", "--noinput", "-v0"), ("collectstatic", "--noinput", "-v0")):
        assert said(manage(env, *step)) == [], step
    assert said(manage(env, "check")) == []
    assert mode(var_dir) == 0o700 and mode(var_dir / "static") == 0o700


def test_a_loose_var_is_said_once_by_the_server_and_by_check(tmp_path: Path, tiny_dir) -> None:
    var_dir = tmp_path / "var"
    var_dir.mkdir(mode=0o755)
    var_dir.chmod(0o755)  # someone else's folder, open to others
    env = fresh_env(var_dir)
    steps = [("migrate", "--noinput", "-v0"), ("add_model", "tiny", "--local", str(tiny_dir))]
    for step in steps:
        assert said(manage(env, *step)) == [], step
    checked = said(manage(env, "check"))
    assert len(checked) == 1 and f"{var_dir}, the server's data folder, has mode 755" in checked[0]
    with live_server(var_dir) as server:
        started = [line for line in server.output().splitlines() if "files.W001" in line]
    assert len(started) == 1, server.output()
