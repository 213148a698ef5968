"""One engine over several processes: every rank of an MLX distributed group runs the same
turns of the engine loop, in lockstep, each with its shard of the model.

Rank 0 (the leader: HTTP, keys, queues, the scheduler's clock) decides each turn: the jobs and
commands taken from its inbox, the jobs cancelled since, the models evicted for idleness and
each runner's prefill pacing. It sends the turn to the followers over the group with MLX's own
collectives (an all_sum to which only rank 0 contributes bytes), and every rank then applies
the same turn and runs the same batched steps, whose sharded layers meet in their own
collectives. Everything else the engine decides (fair shares, which rows finish, stop
strings, sampling: seeds are fixed when a job is taken) follows from the same inputs, so it
comes out the same everywhere.

A process outside a group has a `Solo` link: the turn goes nowhere, the code path is the same.
"""

from __future__ import annotations

import logging
import os
import pickle
import secrets
from dataclasses import dataclass, field, fields, replace
from typing import Any

import mlx.core as mx
import numpy as np

from inference.engine.inbox import Command, ignore

log = logging.getLogger(__name__)

# Bytes of the first collective of a turn: an empty or small turn (most of them) needs no
# second one. The first 8 hold the pickled turn's length.
HEADER = 2048


@dataclass
class Turn:
    """What the leader decided for one turn of the engine loop."""

    # In inbox order: one request's jobs (a list), or a Command.
    items: list[Any] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)  # job ids
    evict: list[str] = field(default_factory=list)  # idle models to unload
    # model id -> (prompt tokens/s, decode step seconds): what prefill budgets come from.
    pacing: dict[str, tuple[float, float]] = field(default_factory=dict)
    stop: bool = False


class Solo:
    """No group: this process is the whole engine."""

    distributed = False
    rank, size = 0, 1
    heartbeat: float | None = None  # an idle engine sleeps until work comes

    def start(self) -> None:
        pass

    def share(self, turn: Turn) -> Turn:
        return turn

    def describe(self) -> dict | None:
        return None

    def portable(self, jobs: list) -> bool:
        return True


class _Linked:
    distributed = True
    # An idle leader still sends an empty turn this often: a follower that died is found
    # while nobody is asking for anything.
    heartbeat: float | None = 1.0

    def __init__(self, group: mx.distributed.Group, backend: str = "") -> None:
        self.group = group
        self.rank, self.size = group.rank(), group.size()
        self.backend = backend

    def start(self) -> None:
        """Every rank draws from the same random state (a sampler without a seed of its own
        gets one from the leader, but MLX's global state is shared too, for model code)."""
        seed = self._exchange(secrets.randbits(62).to_bytes(8, "little") if self.rank == 0 else b"")
        mx.random.seed(int.from_bytes(seed, "little"))

    def describe(self) -> dict:
        return {"rank": self.rank, "size": self.size, "backend": self.backend}

    def portable(self, jobs: list) -> bool:
        """Whether the jobs pickle (a prompt holding something that does not is refused)."""
        return _picklable([_job_fields(job) for job in jobs])

    def _sum(self, data: np.ndarray) -> np.ndarray:
        total = mx.distributed.all_sum(mx.array(data), group=self.group, stream=mx.cpu)
        return np.array(total)

    def _exchange(self, payload: bytes) -> bytes:
        """The leader's bytes on every rank (the followers pass b"")."""
        head = np.zeros(HEADER, dtype=np.uint8)
        if self.rank == 0:
            head[:8] = np.frombuffer(len(payload).to_bytes(8, "little"), dtype=np.uint8)
            first = payload[: HEADER - 8]
            head[8 : 8 + len(first)] = np.frombuffer(first, dtype=np.uint8)
        head = self._sum(head)
        length = int.from_bytes(head[:8].tobytes(), "little")
        if length <= HEADER - 8:
            return head[8 : 8 + length].tobytes()
        rest = np.zeros(length - (HEADER - 8), dtype=np.uint8)
        if self.rank == 0:
            rest[:] = np.frombuffer(payload[HEADER - 8 :], dtype=np.uint8)
        return head[8:].tobytes() + self._sum(rest).tobytes()


class Leader(_Linked):
    """Rank 0: decides each turn and sends it."""

    def share(self, turn: Turn) -> Turn:
        self._exchange(pickle.dumps(_to_wire(turn), protocol=pickle.HIGHEST_PROTOCOL))
        return turn


class Follower(_Linked):
    """Ranks above 0: run the turns rank 0 sends."""

    heartbeat = None

    def share(self, turn: Turn) -> Turn:
        # Only rank 0 writes into the group: the bytes are our own leader's.
        return _from_wire(pickle.loads(self._exchange(b"")))


def join(backend: str = "any") -> _Linked | None:
    """This process's place in the MLX group its launcher set up (mlx.launch, or MLX_RANK and
    MLX_HOSTFILE); None when it runs alone."""
    group = mx.distributed.init(strict=backend != "any", backend=backend)
    if group.size() < 2:
        return None
    kind = Leader if group.rank() == 0 else Follower
    backend = backend if backend != "any" else launched_backend() or "any"
    log.info("rank %d of %d in an MLX group (%s backend)", group.rank(), group.size(), backend)
    return kind(group, backend)


def launched_backend() -> str | None:
    """The backend a launcher set this process up for, from what each sets (mlx.launch:
    MLX_RANK, with MLX_HOSTFILE for ring; mpirun: OMPI_COMM_WORLD_SIZE); None when no
    launcher started it. MLX itself does not say which backend "any" found."""
    if "MLX_IBV_DEVICES" in os.environ or "MLX_JACCL_COORDINATOR" in os.environ:
        return "jaccl"
    if "MLX_HOSTFILE" in os.environ or "MLX_RANK" in os.environ:
        return "ring"
    if "OMPI_COMM_WORLD_SIZE" in os.environ:
        return "mpi"
    return None


_LINK: _Linked | None = None


def set_link(link: _Linked | None) -> None:
    """The group this process joined (manage.py serve does, before the engine starts)."""
    global _LINK
    _LINK = link


def current_link() -> _Linked | Solo:
    return _LINK or Solo()


# The wire: jobs travel as their fields (not their sink, nor their thread-side event);
# commands as the picklable callables they are (operator.methodcaller), others stay home.


def _to_wire(turn: Turn) -> Turn:
    items = []
    for item in turn.items:
        if isinstance(item, list):
            items.append([_job_fields(job) for job in item])
        elif _picklable(item.run):
            items.append(item.run)
    return replace(turn, items=items)


def _job_fields(job: Any) -> tuple[type, dict]:
    # A compiled grammar does not pickle: followers compile params.grammar themselves.
    skip = ("sink", "cancelled", "dropped", "matcher")
    return type(job), {f.name: getattr(job, f.name) for f in fields(job) if f.name not in skip}


def _from_wire(turn: Turn) -> Turn:
    items: list[Any] = []
    for item in turn.items:
        if isinstance(item, list):
            items.append([cls(sink=ignore, **values) for cls, values in item])
        else:
            items.append(Command(item))
    return replace(turn, items=items)


def _picklable(run: Any) -> bool:
    try:
        pickle.dumps(run)
    except Exception:
        return False
    return True
