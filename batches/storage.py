"""Where file contents live: VAR_DIR/files, one file per id, the folder owner-only (0700) and
each file owner-only (0600) from its first byte (config/secrets.py), as the rest of var/."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from django.conf import settings

from config.secrets import PRIVATE_FILE, private_dir

CHUNK = 1 << 20


class TooLarge(Exception):
    """The content passed the cap it was written under; nothing of it is kept."""


def folder() -> Path:
    path = Path(settings.VAR_DIR) / "files"
    private_dir(path)
    return path


def path_of(file_id: str) -> Path:
    if not file_id.replace("-", "").replace("_", "").isalnum():  # ids only, never a path
        raise ValueError(f"not a file id: {file_id!r}")
    return folder() / file_id


def write(file_id: str, chunks: Iterable[bytes], limit: int | None = None) -> int:
    """Writes the chunks as the file's content, created owner-only; returns its size. Past
    `limit` bytes the partial file is removed and TooLarge raised."""
    path = path_of(file_id)
    size = 0
    descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE)
    try:
        with os.fdopen(descriptor, "wb") as out:
            for chunk in chunks:
                size += len(chunk)
                if limit is not None and size > limit:
                    raise TooLarge(size)
                out.write(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return size


def read_chunks(file_id: str) -> Iterator[bytes]:
    with path_of(file_id).open("rb") as source:
        while chunk := source.read(CHUNK):
            yield chunk


def read_lines(file_id: str) -> Iterator[bytes]:
    with path_of(file_id).open("rb") as source:
        yield from source


def remove(file_id: str) -> None:
    path_of(file_id).unlink(missing_ok=True)
