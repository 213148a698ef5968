"""The disk tier's index of its folder (prefix_disk.py): which entries it holds, by model, length
and token hash, and in what order they were last used.

Kept apart from the store so that what the folder holds (and what the cap takes from it) reads in
one place, without the writer thread's hand-overs. Not thread-safe by itself: the store calls it
under its own lock, which also guards what is queued, so that "stored or queued?" is one answer.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import xxhash

from inference.engine import kv_file

SUFFIX = ".kv"
STALE_TEMPORARY = 600.0  # seconds after which a temporary file is a crashed writer's


@dataclass
class Stored:
    key: str
    length: int
    digest: str
    size: int


@dataclass(frozen=True)
class Found:
    name: str
    length: int


def entry_name(key: str, length: int, digest: str) -> str:
    return f"{key}-{length}-{digest}{SUFFIX}"


def parse(name: str, size: int) -> Stored | None:
    """The entry a file name stands for, or None for any other file of the folder."""
    if not name.endswith(SUFFIX) or name.startswith("."):
        return None
    parts = name[: -len(SUFFIX)].split("-")
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    return Stored(parts[0], int(parts[1]), parts[2], size)


def scan(folder: Path) -> list[tuple[str, Stored]]:
    """The folder's entries, least recently used first (file times: touched on use, so the
    next process keeps the order). A crashed writer's temporary file is deleted on the way."""
    found = []
    now = time.time()
    for item in os.scandir(folder):
        try:
            info = item.stat()
        except OSError:
            continue
        if item.name.endswith(".tmp") and now - info.st_mtime > STALE_TEMPORARY:
            Path(item.path).unlink(missing_ok=True)
        stored = parse(item.name, info.st_size)
        if stored is not None and item.is_file():
            found.append((info.st_mtime, item.name, stored))
    return [(name, stored) for _, name, stored in sorted(found)]


class DiskIndex:
    """Entries by name in use order, and per model the lengths stored with their digests (a
    lookup hashes the prompt only at those lengths)."""

    def __init__(self) -> None:
        self.entries: OrderedDict[str, Stored] = OrderedDict()  # least recently used first
        self._lengths: dict[str, dict[int, set[str]]] = {}  # key -> length -> digests
        self.nbytes = 0

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, name: str, stored: Stored) -> None:
        self.entries[name] = stored
        self._lengths.setdefault(stored.key, {}).setdefault(stored.length, set()).add(stored.digest)
        self.nbytes += stored.size

    def forget(self, name: str) -> Stored | None:
        stored = self.entries.pop(name, None)
        if stored is not None:
            self.nbytes -= stored.size
            lengths = self._lengths.get(stored.key, {})
            lengths.get(stored.length, set()).discard(stored.digest)
            if not lengths.get(stored.length, True):
                del lengths[stored.length]
        return stored

    def touch(self, name: str) -> None:
        """Marks the entry used now (the cap takes it last)."""
        if name in self.entries:
            self.entries.move_to_end(name)

    def over_cap(self, max_bytes: int) -> list[str]:
        """Forgets least recently used entries until the folder fits; their names, to delete."""
        victims = []
        while self.nbytes > max_bytes and self.entries:
            name = next(iter(self.entries))
            self.forget(name)
            victims.append(name)
        return victims

    def stored_lengths(self, key: str, limit: int) -> dict[int, set[str]]:
        """A copy of the model's lengths up to `limit` and their digests: the hashing that
        follows runs outside the store's lock."""
        return {n: set(d) for n, d in self._lengths.get(key, {}).items() if n <= limit}


def longest_of(key: str, prompt: list[int], stored: dict[int, set[str]]) -> Found | None:
    """The longest of `stored` (stored_lengths) that is a prefix of `prompt`: the prompt is
    hashed once, read up to each length stored."""
    if not stored:
        return None
    data = kv_file.token_bytes(prompt[: max(stored)])
    digest, done, best = xxhash.xxh3_128(), 0, None
    for length in sorted(stored):
        digest.update(data[done * 4 : length * 4])
        done = length
        if digest.hexdigest() in stored[length]:
            best = Found(entry_name(key, length, digest.hexdigest()), length)
    return best
