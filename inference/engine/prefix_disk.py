"""The prefix cache's disk tier: prompts' KV kept in a folder, so that it outlives the process
and the pool's evictions.

One file per entry (`kv_file`), named for the model's identity (`model_key`: its id and a
fingerprint of its weights and of the formats it computes and keeps KV in, so a changed model
never reads another's KV), the prefix's length and the hash of its tokens. An index of those
names, read from the folder when the store opens, answers a lookup by hashing the prompt's
prefixes only at the lengths stored for its model. The folder keeps at most `max_bytes`, the
least recently used entries (file times, touched on use) going first.

Entries are written by one writer thread: the engine hands over evaluated arrays through a
bounded queue, and an entry that finds the queue full is dropped (counted), never waited for.
A file that cannot be read whole and intact is deleted and counted as a miss: nothing here
raises into a request. One store per folder per process (`shared`), so every engine and runner
of the process agrees on the index and the cap.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx_lm

from inference.engine import kv_file
from inference.engine.config import EngineConfig
from inference.engine.prefix_disk_index import DiskIndex, Found, entry_name, longest_of, parse, scan
from inference.engine.prefix_disk_writer import QUEUE_SIZE, WriterThread
from inference.engine.state import PrefixDiskState
from inference.engine.types import ModelSpec
from inference.engine.weight_files import weight_files

# Named here as well: callers and tests reach them through this module.
__all__ = ["QUEUE_SIZE", "Found", "PrefixDisk", "entry_name", "model_key", "shared"]

log = logging.getLogger(__name__)
# The longest a piece of a file waits for the engines to have nothing to compute: a file written
# beside the steps slowed them, even at a lower priority (2 cores, a 1.7B model: an agent's next
# turn on a 2,000-token prefix took 1.58 s with the last turn's 219 MB being written, 0.92 s
# without the disk tier): the kernels' threads wait for each other, so a core taken from one
# stalls both.
WRITE_DEFER_SECONDS = 10.0
WITHDRAW_WAIT_SECONDS = 0.25  # how long a withdrawal waits for the writer to let go
PAUSE_SLICE_SECONDS = 0.02  # the writer's idle wait, in slices that see a withdrawal


class Withdrawn(Exception):
    """The entry being written was taken back (PrefixDisk.withdraw)."""


def model_key(spec: ModelSpec, compute_format: str, kernels: bool) -> str:
    """The identity of what a model's KV is computed by (its weights, the format it computes
    in, as asked and as chosen, the CPU kernels or not) and kept as (`kv_cache`)."""
    facts = {
        "format": kv_file.MAGIC.hex(),
        "model": spec.model_id,
        "location": spec.location,
        "files": weight_files(spec.location, spec.from_hub),
        "kv_cache": spec.kv_cache,
        "activations": spec.activations,
        "compute_format": [spec.compute_format, compute_format, kernels],
        "parallel": spec.parallel,
        # An adapter's KV is computed by its base's weights and its own.
        "base": [spec.base.location, weight_files(spec.base.location, spec.base.from_hub)]
        if spec.base
        else None,
        "libraries": [mx.__version__, mlx_lm.__version__],
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:32]


class PrefixDisk:
    """Lookups and reads on the engine thread; writes on its own thread; any thread may
    read `state()`. What the folder holds is its index's (prefix_disk_index.DiskIndex), the
    thread and its queue the writer's (prefix_disk_writer.WriterThread); the store keeps the
    hand-overs between them (queued, being written, withdrawn) under one lock."""

    def __init__(self, folder: Path, max_bytes: int, min_tokens: int = 512) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self.min_tokens = min_tokens
        self._lock = threading.Lock()
        self._index = DiskIndex()
        self._queued: set[str] = set()
        self._waiting: dict[str, kv_file.Prepared] = {}  # queued, not yet being written
        self._writing: str | None = None  # the entry being written now
        self._withdrawn: set[str] = set()  # entries to stop writing
        self._let_go = threading.Condition(self._lock)  # the writer dropped an entry
        # Looked up on each entry, not bound now: a subclass or a test may replace _write.
        self._writer = WriterThread(lambda name, prepared: self._write(name, prepared))
        self._busy: set[int] = set()  # the engines computing now (busy())
        self._idle = threading.Event()
        self._idle.set()
        self.hits = self.misses = self.failed_reads = 0
        self.writes = self.dropped_writes = self.failed_writes = 0
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._load()

    def _load(self) -> None:
        found = scan(self.folder)
        with self._lock:
            for name, stored in found:
                self._index.add(name, stored)
            victims = self._index.over_cap(self.max_bytes)
        self._delete(victims)
        log.info(
            "prefix cache on disk: %d entries, %.1f MiB", len(found), self._index.nbytes / 2**20
        )

    def _delete(self, names: list[str]) -> None:
        for name in names:
            (self.folder / name).unlink(missing_ok=True)

    def longest(self, key: str, prompt: list[int], limit: int) -> Found | None:
        """The longest stored prefix of `prompt` no longer than `limit` tokens: the prompt is
        hashed once, read up to each length stored for the model."""
        with self._lock:
            stored = self._index.stored_lengths(key, limit)
        return longest_of(key, prompt, stored)

    def read(self, found: Found, prompt: list[int]) -> list[Any] | None:
        """The stored cache of `found`, or None (an unreadable file is deleted)."""
        path = self.folder / found.name
        try:
            layers = kv_file.read(path, prompt[: found.length])
        except FileNotFoundError:  # another process's store evicted it
            self.misses += 1
            self._drop(found.name)
            return None
        except Exception as exc:
            log.warning("prefix cache entry %s unreadable, deleted: %s", found.name, exc)
            self.misses += 1
            self.failed_reads += 1
            self._drop(found.name)
            path.unlink(missing_ok=True)
            return None
        self.hits += 1
        self._touch(found.name, path)
        return layers

    def _drop(self, name: str) -> None:
        with self._lock:
            self._index.forget(name)

    def _touch(self, name: str, path: Path) -> None:
        """Marks the entry used now, in the index and on disk (the next process's order)."""
        with self._lock:
            self._index.touch(name)
        with contextlib.suppress(OSError):
            os.utime(path)

    def offer(self, key: str, tokens: list[int], cache: list[Any]) -> bool:
        """Engine thread: queues the KV of `tokens` for writing, if it is worth a file and
        not stored yet. Returns whether it was queued."""
        if len(tokens) < self.min_tokens:
            return False
        name = entry_name(key, len(tokens), kv_file.token_digest(tokens))
        with self._lock:
            if name in self._index:
                self._index.touch(name)
                return False
            if name in self._queued:
                return False
        if self._writer.full():
            self.dropped_writes += 1
            return False
        prepared = kv_file.prepare(tokens, cache)
        if prepared.nbytes > self.max_bytes:
            return False
        if not self._writer.put(name, prepared):
            self.dropped_writes += 1
            return False
        with self._lock:
            self._queued.add(name)
            self._waiting[name] = prepared
        return True

    def withdraw(self, key: str, tokens: list[int]) -> bool:
        """Engine thread: takes back the queued entry of `tokens` (its views keep the cache's
        arrays shared, and the engine is about to grow them in place: a shared array is
        copied whole first). One being written is stopped before its next array, waiting up
        to WITHDRAW_WAIT_SECONDS for the writer to let go. Whether nothing holds it now."""
        name = entry_name(key, len(tokens), kv_file.token_digest(tokens))
        with self._lock:
            prepared = self._waiting.pop(name, None)
            if prepared is not None:  # not begun: the writer skips it (_write)
                self._queued.discard(name)
                prepared.arrays = []
                return True
            if self._writing != name:
                return True  # written (or never queued)
            self._withdrawn.add(name)
            self._let_go.wait_for(lambda: self._writing != name, WITHDRAW_WAIT_SECONDS)
            return self._writing != name

    def busy(self, engine: int, busy: bool) -> None:
        """An engine (its id) says whether it has sequences to compute: writes wait until
        none has, or WRITE_DEFER_SECONDS."""
        with self._lock:
            (self._busy.add if busy else self._busy.discard)(engine)
            if self._busy:
                self._idle.clear()
            else:
                self._idle.set()

    def _until_idle(self, name: str) -> None:
        """Writer thread, before each piece of the file of `name`: waits while an engine
        computes (up to WRITE_DEFER_SECONDS); raises Withdrawn if it was taken back."""
        deadline = time.monotonic() + WRITE_DEFER_SECONDS
        while name not in self._withdrawn:
            if self._idle.wait(PAUSE_SLICE_SECONDS) or time.monotonic() > deadline:
                break
        if name in self._withdrawn:
            raise Withdrawn(name)

    def _write(self, name: str, prepared: kv_file.Prepared) -> None:
        with self._lock:
            if self._waiting.pop(name, None) is None:  # withdrawn
                return
            self._writing = name
        try:
            self._write_file(name, prepared)
        finally:
            prepared.arrays = []  # the views go before the engine is told
            with self._lock:
                self._writing = None
                self._withdrawn.discard(name)
                self._let_go.notify_all()

    def _write_file(self, name: str, prepared: kv_file.Prepared) -> None:
        try:
            size = kv_file.write(self.folder / name, prepared, pause=lambda: self._until_idle(name))
        except Withdrawn:
            with self._lock:
                self._queued.discard(name)
            return
        except Exception:
            log.exception("writing prefix cache entry %s failed", name)
            self.failed_writes += 1
            with self._lock:
                self._queued.discard(name)
            return
        stored = parse(name, size)
        assert stored is not None
        with self._lock:
            self._queued.discard(name)
            self._index.forget(name)
            self._index.add(name, stored)
            victims = self._index.over_cap(self.max_bytes)
        self.writes += 1
        self._delete(victims)

    def flush(self, timeout: float = 30.0) -> bool:
        """Waits until every queued entry is written (or `timeout`); whether it was."""
        return self._writer.flush(timeout)

    def close(self) -> None:
        """Writes what is queued, stops the writer, and leaves the process's stores."""
        with _stores_lock:
            if _stores.get(self.folder) is self:
                del _stores[self.folder]
        self._idle.set()  # what is queued is written now
        self._writer.stop()

    def state(self) -> PrefixDiskState:
        with self._lock:
            entries, nbytes = len(self._index), self._index.nbytes
        return PrefixDiskState(
            bytes=nbytes,
            entries=entries,
            max_bytes=self.max_bytes,
            hits=self.hits,
            misses=self.misses,
            failed_reads=self.failed_reads,
            writes=self.writes,
            dropped_writes=self.dropped_writes,
            failed_writes=self.failed_writes,
        )


_stores: dict[Path, PrefixDisk] = {}
_stores_lock = threading.Lock()


def shared(config: EngineConfig) -> PrefixDisk | None:
    """This process's store for the configured folder (None when the tier is off, or the
    folder cannot be used: prefix reuse then stays in memory)."""
    if not config.prefix_cache_dir or config.prefix_cache_disk_bytes <= 0:
        return None
    folder = Path(config.prefix_cache_dir).expanduser().resolve()
    with _stores_lock:
        store = _stores.get(folder)
        if store is None:
            try:
                store = _stores[folder] = PrefixDisk(
                    folder, config.prefix_cache_disk_bytes, config.prefix_cache_disk_min_tokens
                )
            except OSError as exc:
                log.warning("prefix cache folder %s unusable, kept in memory only: %s", folder, exc)
                return None
        store.max_bytes = config.prefix_cache_disk_bytes
        store.min_tokens = config.prefix_cache_disk_min_tokens
        return store
