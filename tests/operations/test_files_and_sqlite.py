"""What `var/` holds (the SQLite database with staff sessions and stored conversations, the
secrets) is owner-only from its first byte, the start-up check says when it is not, and the
SQLite database takes concurrent writers (WAL, IMMEDIATE transactions, a busy timeout). Each
test runs manage.py on a fresh VAR_DIR of its own, as a new install's first start would."""

from __future__ import annotations

import subprocess
import sys
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest

from tests.support.helpers import ROOT, fresh_env, mode
from tests.support.live_server import manage

# Its own SQLite files, never the test database: the PostgreSQL pass would only repeat it.
pytestmark = pytest.mark.database_independent


def test_a_fresh_var_is_owner_only_and_the_check_says_when_it_is_not(tmp_path: Path) -> None:
    var_dir = tmp_path / "var"
    env = fresh_env(var_dir)
    manage(env, "migrate", "-v0")
    assert mode(var_dir) == 0o700
    for name in ("db.sqlite3", "secret_key", "admin_token"):
        assert mode(var_dir / name) == 0o600, name

    (var_dir / "db.sqlite3").chmod(0o644)
    checked = manage(env, "check")
    warnings = [line for line in checked.stderr.splitlines() if "files.W001" in line]
    assert len(warnings) == 1, checked.stderr
    assert str(var_dir / "db.sqlite3") in warnings[0] and "mode 644" in warnings[0]


def test_sixteen_concurrent_writers_never_find_the_database_locked(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.operations.sqlite_writers"],
        cwd=ROOT,
        env=fresh_env(tmp_path / "var"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["stored 240"], done.stdout[-3000:]


def _secret_after(barrier: Barrier, path: Path, keys: Queue) -> None:  # the test's processes
    from config.secrets import read_or_create_secret

    barrier.wait()
    keys.put(read_or_create_secret(path))


def test_processes_starting_at_once_agree_on_one_whole_secret(tmp_path: Path) -> None:
    # make test's two lanes start together on a fresh clone: one read the secret file while the
    # other had created it but not yet written the key, and got an empty SECRET_KEY.
    import multiprocessing

    context = multiprocessing.get_context("fork")
    for round_ in range(20):
        path = tmp_path / f"secret_{round_}"
        barrier, keys = context.Barrier(6), context.Queue()
        workers = [
            context.Process(target=_secret_after, args=(barrier, path, keys)) for _ in range(6)
        ]
        for worker in workers:
            worker.start()
        try:
            found = {keys.get(timeout=30) for _ in workers}
        finally:
            for worker in workers:
                worker.join(timeout=30)
                worker.kill()  # one that hung is not left behind
        assert found == {path.read_text()} and len(path.read_text()) > 40, found
        assert mode(path) == 0o600
    # No process's staging file is left behind.
    assert {entry.name for entry in tmp_path.iterdir()} == {f"secret_{n}" for n in range(20)}
