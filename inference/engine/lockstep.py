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

Followers unpickle what their leader sends, so every turn is signed (a `Seal`: HMAC-SHA256
under the group's secret, DISTRIBUTED_SECRET, keyed afresh for each start of the group from
nonces every rank draws, over the turn's number and its bytes) and checked before it is
unpickled: a turn that is unsigned, badly signed or not the next one (a replay) stops the
follower (TurnRefused) instead of running code someone else wrote on the group's network.

A process outside a group has a `Solo` link: the turn goes nowhere, the code path is the same.
"""

from __future__ import annotations

import hashlib
import hmac
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
# Bytes of a sealed turn before its payload: its number (8), then its HMAC-SHA256 (32).
SEAL = 40
# Each rank's share of the nonces a group's session key is drawn from.
NONCE = 16
# A shorter group secret is refused: it would be guessable offline from one signed turn.
MIN_SECRET = 16


class TurnRefused(Exception):
    """A turn this follower will not run: unsigned, badly signed, or not the next one."""


def check_secret(secret: bytes) -> bytes:
    """The group secret, or a ValueError when it is missing or too short."""
    if len(secret) < MIN_SECRET:
        raise ValueError(
            f"a distributed group needs a secret of at least {MIN_SECRET} characters "
            "(DISTRIBUTED_SECRET, the same on every rank): its turns are signed with it"
        )
    return secret


class Seal:
    """Signs the leader's turns and checks them on a follower, before anything unpickles them.

    The key is the group secret bound to `session` (nonces from every rank, drawn at each
    start: a turn recorded from an earlier run of the group does not verify in this one); each
    turn carries its number, and a follower takes only the next one (a replay is refused)."""

    def __init__(self, secret: bytes, session: bytes = b"") -> None:
        self._key = hmac.new(
            check_secret(secret), b"lockstep session:" + session, hashlib.sha256
        ).digest()
        self._number = 0  # of the last turn signed or taken

    def _mac(self, number: bytes, payload: bytes) -> bytes:
        return hmac.new(self._key, number + payload, hashlib.sha256).digest()

    def seal(self, payload: bytes) -> bytes:
        self._number += 1
        number = self._number.to_bytes(8, "little")
        return number + self._mac(number, payload) + payload

    def open(self, sealed: bytes) -> bytes:
        """The payload, once it proves to be the leader's next turn; TurnRefused otherwise."""
        if len(sealed) < SEAL:
            raise TurnRefused("an unsigned turn arrived on the group's link")
        number, mac, payload = sealed[:8], sealed[8:SEAL], sealed[SEAL:]
        if not hmac.compare_digest(mac, self._mac(number, payload)):
            raise TurnRefused(
                "a turn with a bad signature arrived on the group's link (not our leader's, "
                "or DISTRIBUTED_SECRET differs between ranks)"
            )
        if int.from_bytes(number, "little") != self._number + 1:
            raise TurnRefused(
                f"a stale turn arrived on the group's link: number "
                f"{int.from_bytes(number, 'little')}, expected {self._number + 1}"
            )
        self._number += 1
        return payload


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

    def __init__(self, group: mx.distributed.Group, secret: bytes, backend: str = "") -> None:
        self.group = group
        self.rank, self.size = group.rank(), group.size()
        self.backend = backend
        self._secret = secret
        self._seal = Seal(secret)  # until start() binds it to this run's session

    def start(self) -> None:
        """The session's key, from nonces every rank adds; then every rank draws from the same
        random state (a sampler without a seed of its own gets one from the leader, but MLX's
        global state is shared too, for model code)."""
        self._seal = Seal(self._secret, self._nonces())
        seed = self._shared(secrets.randbits(62).to_bytes(8, "little") if self.rank == 0 else b"")
        mx.random.seed(int.from_bytes(seed, "little"))

    def _nonces(self) -> bytes:
        """Every rank's fresh random bytes, each in its own slot of one all_sum."""
        slots = np.zeros(self.size * NONCE, dtype=np.uint8)
        mine = np.frombuffer(secrets.token_bytes(NONCE), dtype=np.uint8)
        slots[self.rank * NONCE : (self.rank + 1) * NONCE] = mine
        return self._sum(slots).astype(np.uint8).tobytes()

    def _shared(self, payload: bytes) -> bytes:
        """The leader's bytes on every rank, signed by the leader and checked by the others
        (the followers pass b"")."""
        if self.rank == 0:
            self._exchange(self._seal.seal(payload))
            return payload
        return self._seal.open(self._exchange(b""))

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
        self._shared(pickle.dumps(_to_wire(turn), protocol=pickle.HIGHEST_PROTOCOL))
        return turn


class Follower(_Linked):
    """Ranks above 0: run the turns rank 0 sends."""

    heartbeat = None

    def share(self, turn: Turn) -> Turn:
        # Checked before unpickling: pickle runs whatever code the bytes name.
        return _from_wire(pickle.loads(self._shared(b"")))


def join(backend: str = "any", secret: bytes = b"") -> _Linked | None:
    """This process's place in the MLX group its launcher set up (mlx.launch, or MLX_RANK and
    MLX_HOSTFILE); None when it runs alone. `secret` signs the group's turns (a ValueError
    when it is missing or short: no group runs unsigned)."""
    group = mx.distributed.init(strict=backend != "any", backend=backend)
    if group.size() < 2:
        return None
    check_secret(secret)
    kind = Leader if group.rank() == 0 else Follower
    backend = backend if backend != "any" else launched_backend() or "any"
    log.info("rank %d of %d in an MLX group (%s backend)", group.rank(), group.size(), backend)
    return kind(group, secret, backend)


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
