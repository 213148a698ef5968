"""Lockstep's links on their own: a Solo hands the turn back; a turn survives the trip a Leader
sends it on (jobs as their fields, commands as picklable callables); a Leader and a Follower
exchange turns of every size. The two ranks run as two threads of this process, whose
collective is an all_sum between them: only that transport (`_sum`) stands in for MLX's, the
framing and the pickling are the links' own. tests/engine/test_distributed.py runs the real
two-process group end to end."""

from __future__ import annotations

import operator
import pickle
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import fields
from typing import Any, TypeVar

import mlx.core as mx
import numpy as np
import pytest

from inference.engine.inbox import Command, ignore
from inference.engine.lockstep import (
    HEADER,
    Follower,
    Leader,
    Solo,
    Turn,
    _from_wire,
    _Linked,
    _to_wire,
    current_link,
    join,
)
from inference.engine.types import GenerationJob, ImagePrompt, ModelSpec, SamplingParams
from tests.engine.jobs import greedy, token_job

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

SPEC = ModelSpec(model_id="tiny", location="/nowhere")
SECRET = b"a group secret for the tests"
Link = TypeVar("Link", bound=_Linked)


class Group:
    """Stands in for an mx.distributed.Group: the links ask it only for rank and size."""

    def __init__(self, rank: int, size: int) -> None:
        self._rank, self._size = rank, size

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size


class PairedSum:
    """An all_sum between two threads: each rank's array in, the element-wise sum out to both,
    once both have sent theirs (as MLX's collective, which blocks until every rank joins)."""

    def __init__(self) -> None:
        self._barrier = threading.Barrier(2)
        self._parts: dict[int, np.ndarray] = {}
        self.collectives = 0

    def link(self, kind: type[Link], rank: int) -> Link:
        link = kind(Group(rank, 2), SECRET, backend="threads")
        link._sum = lambda data: self._sum(rank, data)  # type: ignore[method-assign]
        return link

    def _sum(self, rank: int, data: np.ndarray) -> np.ndarray:
        self._parts[rank] = data
        self._barrier.wait(timeout=10)
        total = self._parts[0] + self._parts[1]  # shapes must agree, as across ranks
        self._barrier.wait(timeout=10)  # both have read before a next round overwrites
        if rank == 0:
            self.collectives += 1
        return total


def both_ranks(leader_side: Callable[[Leader], Any], follower_side: Callable[[Follower], Any]):
    """Runs each rank's side at once (a collective needs both); returns both results and how
    many collectives they took."""
    transport = PairedSum()
    leader, follower = transport.link(Leader, 0), transport.link(Follower, 1)
    with ThreadPoolExecutor(1) as pool:
        received: Future = pool.submit(follower_side, follower)
        sent = leader_side(leader)
        return sent, received.result(timeout=10), transport.collectives


class Recorder:
    """What a command's callable asked of the engine it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def unload(self, *args: Any) -> str:
        self.calls.append(("unload", *args))
        return "done"


def numbered(job: GenerationJob, job_id: int) -> GenerationJob:
    job.id = job_id  # the leader's engine numbers each job it takes
    return job


def a_turn(prompt_tokens: int = 8) -> Turn:
    jobs = [
        numbered(token_job(SPEC, list(range(3, 3 + prompt_tokens)), greedy(4), "req", "key"), 1),
        numbered(token_job(SPEC, [5, 6, 7], SamplingParams(seed=42, stop=("x",))), 2),
    ]
    jobs[0].cancelled.set()  # the leader's thread-side flag: never what a follower reads
    jobs[0].matcher = threading.Lock()  # a compiled grammar does not pickle: it stays home
    commands = [
        Command(operator.methodcaller("unload", "tiny")),
        Command(lambda engine: engine),  # not picklable: runs on the leader only
    ]
    return Turn(
        items=[jobs, *commands],
        cancelled=[7, 9],
        evict=["idle-model"],
        pacing={"tiny": (1234.5, 0.05)},
    )


def job_values(job: GenerationJob) -> dict:
    skip = ("sink", "cancelled", "dropped", "matcher")
    return {f.name: getattr(job, f.name) for f in fields(job) if f.name not in skip}


def assert_received(received: Turn, sent: Turn) -> None:
    """What a follower must make of the leader's turn."""
    assert (received.cancelled, received.evict, received.pacing, received.stop) == (
        sent.cancelled,
        sent.evict,
        sent.pacing,
        sent.stop,
    )
    jobs, unload = received.items  # the lambda command stayed home
    for got, original in zip(jobs, sent.items[0], strict=True):
        assert type(got) is GenerationJob and got is not original
        assert job_values(got) == job_values(original)
        assert got.sink is ignore and got.matcher is None
        assert not got.cancelled.is_set() and not got.dropped
    assert isinstance(unload, Command) and not unload.future.done()
    recorder = Recorder()
    assert unload.run(recorder) == "done"
    assert recorder.calls == [("unload", "tiny")]


def test_alone_the_link_is_solo_and_hands_the_turn_back():
    assert join() is None  # no launcher: a group of one
    link = current_link()
    assert isinstance(link, Solo)
    turn = a_turn()
    assert link.share(turn) is turn
    assert (link.distributed, link.rank, link.size, link.describe()) == (False, 0, 1, None)
    assert link.portable(turn.items[0])


def test_a_turn_round_trips_through_pickling():
    turn = a_turn()
    wire = pickle.dumps(_to_wire(turn), protocol=pickle.HIGHEST_PROTOCOL)
    assert_received(_from_wire(pickle.loads(wire)), turn)
    assert len(turn.items) == 3 and turn.items[0][0].cancelled.is_set()  # the leader's intact


@pytest.mark.parametrize(("prompt_tokens", "collectives"), [(8, 1), (3000, 2)])
def test_a_follower_receives_the_leader_s_turn(prompt_tokens, collectives):
    turn = a_turn(prompt_tokens)
    own = Turn(stop=True)  # what a follower's engine decides is not what it runs
    sent, received, used = both_ranks(lambda leader: leader.share(turn), lambda f: f.share(own))
    assert sent is turn
    assert_received(received, turn)
    # A small turn fits in the first collective's header; a long prompt needs a second.
    assert used == collectives


@pytest.mark.parametrize("size", [0, 1, HEADER - 8, HEADER - 7, 3 * HEADER + 5])
def test_bytes_of_any_length_arrive_whole(size):
    payload = bytes(range(256)) * (size // 256) + bytes(range(size % 256))
    sent, received, used = both_ranks(
        lambda leader: leader._exchange(payload), lambda f: f._exchange(b"")
    )
    assert received == sent == payload
    assert used == (1 if size <= HEADER - 8 else 2)


def test_every_rank_is_seeded_alike(monkeypatch):
    seeds: list[int] = []
    real_seed = mx.random.seed
    monkeypatch.setattr(mx.random, "seed", lambda value: seeds.append(value) or real_seed(value))
    both_ranks(lambda leader: leader.start(), lambda f: f.start())
    assert len(seeds) == 2 and seeds[0] == seeds[1]  # the leader's draw, on both


def test_the_links_describe_themselves():
    transport = PairedSum()
    leader, follower = transport.link(Leader, 0), transport.link(Follower, 1)
    assert leader.describe() == {"rank": 0, "size": 2, "backend": "threads"}
    assert follower.describe() == {"rank": 1, "size": 2, "backend": "threads"}
    assert leader.distributed and follower.distributed
    # An idle leader still sends empty turns (a dead follower is found); followers only wait.
    assert leader.heartbeat == 1.0 and follower.heartbeat is None


def test_only_jobs_that_pickle_are_portable():
    leader = PairedSum().link(Leader, 0)
    assert leader.portable(a_turn().items[0])  # its unpicklable matcher stays home
    locked = token_job(SPEC, [1, 2], greedy(2))
    locked.prompt = ImagePrompt("<image>", images=(threading.Lock(),))
    assert not leader.portable([locked])
