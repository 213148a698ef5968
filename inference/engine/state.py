"""The engine's state as one frozen snapshot: what /health, /health/ready, /metrics, the
control API and the dashboard all read. The engine thread publishes a fresh EngineState after
every turn of its loop (a reference swap, so readers never wait for a decode step); the
supervisor adds what outlives engines (restarts, admission) to make EngineHealth."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from inference.engine.types import BATCH


@dataclass(frozen=True)
class ModelState:
    id: str
    bytes: int
    compute_format: str
    kernels: bool  # computing with the CPU kernels
    format_reason: str
    pinned: bool
    load_seconds: float
    last_used: float  # monotonic clock: idle time keeps growing between snapshots
    active_sequences: int  # past their first token
    queued_sequences: int  # admitted to the batch, still prefilling
    tokens_per_second: float
    prefix_cache_bytes: int
    prefix_disk_hits: int = 0  # prompts that reused a prefix read from the disk tier
    prefix_disk_tokens: int = 0  # prompt tokens those prefixes held
    # Speculative decoding (engine/speculative.py): draft tokens verified, and those kept.
    draft_tokens: int = 0
    accepted_draft_tokens: int = 0
    # Verification steps, and those whose rejections recurrent state was fed again for
    # (engine/rewind.py).
    verify_steps: int = 0
    replayed_steps: int = 0
    # Per drafter: (draft tokens verified, kept); and what its MTP heads are, or why none.
    drafters: dict[str, tuple[int, int]] = field(default_factory=dict)
    mtp: str = ""
    mtp_heads: bool = False
    # Its own idle TTL in seconds, from a request's keep_alive (None: the engine's).
    keep_alive: float | None = None
    kv_cache: str = ""  # the KV format it computes with (kv.KVFormat.describe); "" if none
    # How the CPU kernels' integer decode path rounds its activations ("15bit", "8bit"); ""
    # where no quantized layer computes in them.
    activations: str = ""
    q6k: str = ""  # what a GGUF import's Q6_K layers became ("" where it has none)
    context_length: int = 0  # the context it serves (the catalog's, else its config's)
    # What its weights are now (weights_format.describe: "4-bit g64", "mxfp4", "bfloat16"):
    # compute_format "stored" alone does not say what is stored.
    weights: str = ""
    # Of active_sequences and queued_sequences, the batch-priority ones (scheduling.py).
    batch_active_sequences: int = 0
    batch_queued_sequences: int = 0

    @property
    def idle_seconds(self) -> float:
        return max(0.0, time.monotonic() - self.last_used)


@dataclass(frozen=True)
class PrefixDiskState:
    """The prefix cache's disk tier (engine/prefix_disk.py), over every model of the process:
    what the folder holds, and what this process read and wrote."""

    bytes: int
    entries: int
    max_bytes: int
    hits: int  # lookups served from disk
    misses: int  # memory misses of prompts disk could hold that it did not serve either
    failed_reads: int  # unreadable files (corrupt, truncated), deleted
    writes: int
    dropped_writes: int  # offered while the writer's queue was full
    failed_writes: int  # the file could not be written (disk full, permissions)


@dataclass(frozen=True)
class EngineState:
    """Published by the engine thread only."""

    device: str
    budget_bytes: int
    kernels: str = ""  # the CPU kernels in use ("avx2, 2 threads, int8 decode ...") or why not
    models: tuple[ModelState, ...] = ()
    evictions: int = 0  # models unloaded to make room or for being idle
    prefix_disk: PrefixDiskState | None = None  # None: no disk tier

    @property
    def running(self) -> int:
        """Sequences in a batch: decoding or prefilling."""
        return sum(m.active_sequences + m.queued_sequences for m in self.models)

    @property
    def decoding(self) -> int:
        return sum(m.active_sequences for m in self.models)

    @property
    def decoding_batch(self) -> int:
        return sum(m.batch_active_sequences for m in self.models)

    def decoding_of(self, priority: str) -> int:
        """`decoding`, of one priority (types.PRIORITIES)."""
        return self.decoding_batch if priority == BATCH else self.decoding - self.decoding_batch


@dataclass(frozen=True)
class EngineHealth:
    """The current engine's state plus what the supervisor keeps across restarts."""

    state: EngineState
    alive: bool  # the engine thread runs and has not been abandoned
    restarting: bool
    restarts: int
    last_failure: str | None
    queued: int  # admitted by admission control, not yet decoding
    evictions: int  # by every engine of this process
    group: dict | None = None  # rank, size, backend of this process's distributed group
    group_lost: str | None = None  # why the group broke (no restart can mend it)
    queued_batch: int = 0  # of `queued`, the batch-priority ones

    @property
    def ready(self) -> bool:
        return self.alive and not self.restarting

    @property
    def problems(self) -> list[str]:
        """Why this engine should get no traffic now (empty when ready)."""
        if self.group_lost:
            return [f"distributed group lost: {self.group_lost}"]
        if self.restarting:
            return ["engine restarting"]
        return [] if self.alive else ["engine not running"]

    @property
    def running(self) -> int:
        return self.state.running

    @property
    def models(self) -> tuple[ModelState, ...]:
        return self.state.models

    @property
    def loaded_ids(self) -> list[str]:
        return [m.id for m in self.state.models]

    @property
    def used_bytes(self) -> int:
        return sum(m.bytes for m in self.state.models)

    @property
    def tokens_per_second(self) -> float:
        return sum(m.tokens_per_second for m in self.state.models)
