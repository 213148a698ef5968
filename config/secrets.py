"""The files only this server's user may read: var/ (the database, stored conversations,
uploads, logs) and the secrets in it. Each is created owner-only from its first byte, not
written first and chmodded after (a reader could open it in between)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def private_dir(path: Path) -> None:
    """Makes the folder owner-only when this call creates it; an existing folder keeps its mode
    (the operator chose it), and the start-up check says when others may read it."""
    try:
        path.mkdir(mode=PRIVATE_DIR, parents=True)
    except FileExistsError:  # there already, or made this moment by another process
        return
    path.chmod(PRIVATE_DIR)  # mkdir's mode passes through the umask; this does not


def create_private_file(path: Path) -> bool:
    """Creates an empty owner-only file unless one exists; True when it did."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE))
    except FileExistsError:
        return False
    return True


def read_or_create_secret(path: Path) -> str:
    """The secret kept in path, made once. Two processes starting at once (make test's lanes, a
    server and a manage.py command) agree on one key, and neither ever reads a half-written
    one: the key is written whole to a private file of this process first, then linked into
    place, which fails when another process got there first (then its key is read)."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    key = secrets.token_urlsafe(50)
    staging = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        with os.fdopen(
            os.open(staging, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE), "w"
        ) as out:
            out.write(key)
        os.link(staging, path)
    except FileExistsError:
        return path.read_text().strip()
    except OSError:  # a file system without hard links: created exclusively, then written
        return _create_exclusively(path, key)
    finally:
        staging.unlink(missing_ok=True)
    return key


def _create_exclusively(path: Path, key: str) -> str:
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(descriptor, "w") as out:
        out.write(key)
    return key
