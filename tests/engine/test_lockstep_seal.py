"""The group's turns are signed: a follower checks each one (HMAC-SHA256 under the group's
secret, bound to this run's session, numbered) before it unpickles it, and refuses one that
is unsigned, tampered with, signed with another key or replayed, without unpickling it. The two
ranks run as two threads over test_lockstep's stand-in all_sum."""

from __future__ import annotations

import pickle
from concurrent.futures import ThreadPoolExecutor

import pytest

from inference.engine.lockstep import SEAL, Follower, Leader, Seal, Turn, TurnRefused, join
from tests.engine.test_lockstep import SECRET, PairedSum, both_ranks

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

UNPICKLED: list[str] = []


def _ran(note: str) -> None:
    UNPICKLED.append(note)


class Payload:
    """Unpickling it runs code (as any pickle can): the flag says whether it was."""

    def __reduce__(self):
        return (_ran, ("unpickled",))


@pytest.fixture(autouse=True)
def no_flag():
    UNPICKLED.clear()
    yield
    UNPICKLED.clear()


def evil() -> bytes:
    return pickle.dumps(Payload())


def test_a_sealed_turn_opens_in_order():
    leader, follower = Seal(SECRET, b"session"), Seal(SECRET, b"session")
    for payload in (b"", b"one", evil()):
        assert follower.open(leader.seal(payload)) == payload


@pytest.mark.parametrize(
    "spoil",
    [
        lambda sealed: sealed[:-1] + bytes([sealed[-1] ^ 1]),  # a payload byte flipped
        lambda sealed: sealed[:8] + bytes(32) + sealed[SEAL:],  # the MAC zeroed
        lambda sealed: (2).to_bytes(8, "little") + sealed[8:],  # the number changed
        lambda sealed: sealed[SEAL:],  # no seal at all
        lambda sealed: b"",
    ],
)
def test_a_tampered_turn_is_refused(spoil):
    sealed = Seal(SECRET).seal(evil())
    with pytest.raises(TurnRefused):
        Seal(SECRET).open(spoil(sealed))


def test_another_key_or_session_is_refused():
    with pytest.raises(TurnRefused, match="bad signature"):
        Seal(SECRET).open(Seal(b"another secret of the group").seal(b"x"))
    with pytest.raises(TurnRefused, match="bad signature"):  # a recording of an earlier run
        Seal(SECRET, b"today").open(Seal(SECRET, b"yesterday").seal(b"x"))


def test_a_replayed_turn_is_refused():
    leader, follower = Seal(SECRET), Seal(SECRET)
    first, second = leader.seal(b"first"), leader.seal(b"second")
    assert follower.open(first) == b"first"
    with pytest.raises(TurnRefused, match="number 1, expected 2"):
        follower.open(first)
    assert follower.open(second) == b"second"  # a refused turn does not move the count
    with pytest.raises(TurnRefused, match="stale"):
        Seal(SECRET).open(second)  # skipping ahead is refused too


@pytest.mark.parametrize("secret", [b"", b"short"])
def test_no_group_runs_without_a_secret(secret):
    with pytest.raises(ValueError, match="DISTRIBUTED_SECRET"):
        Seal(secret)
    with pytest.raises(ValueError, match="DISTRIBUTED_SECRET"):
        Follower(PairedSum().link(Follower, 1).group, secret)
    assert join(secret=secret) is None  # alone (no launcher) no secret is needed


def test_a_follower_unpickles_nothing_it_cannot_verify():
    """A forger on the group's link (here: a leader with the wrong secret) sends a turn whose
    unpickling would run its code: the follower refuses it before pickle sees it."""
    transport = PairedSum()
    forger, follower = transport.link(Leader, 0), transport.link(Follower, 1)
    forger._seal = Seal(b"not the group's secret at all")
    with ThreadPoolExecutor(1) as pool:
        received = pool.submit(follower.share, Turn())
        forger._shared(evil())
        with pytest.raises(TurnRefused, match="bad signature"):
            received.result(timeout=10)
    assert UNPICKLED == []


def test_a_follower_refuses_a_replayed_turn_from_the_link():
    """The same signed bytes sent twice (a recording played back): the second is refused."""
    transport = PairedSum()
    leader, follower = transport.link(Leader, 0), transport.link(Follower, 1)
    sealed = leader._seal.seal(pickle.dumps(Turn(evict=["m"])))
    with ThreadPoolExecutor(1) as pool:
        got = pool.submit(follower.share, Turn())
        leader._exchange(sealed)
        assert got.result(timeout=10).evict == ["m"]
        again = pool.submit(follower.share, Turn())
        leader._exchange(sealed)
        with pytest.raises(TurnRefused, match="stale"):
            again.result(timeout=10)


def test_start_keys_the_session_from_every_rank():
    """After start() both ranks hold the same session key (the seed exchange verified), a key
    that a seal without this session's nonces does not share."""
    sent, received, _ = both_ranks(
        lambda leader: (leader.start(), leader._seal)[1],
        lambda follower: (follower.start(), follower._seal)[1],
    )
    assert sent._key == received._key != Seal(SECRET)._key


def test_serve_refuses_to_join_a_group_without_a_secret(settings, monkeypatch):
    """Checked before joining (the other ranks would otherwise wait on this one)."""
    from django.core.management import CommandError, call_command

    from inference.engine import lockstep

    settings.DISTRIBUTED_SECRET = "short"
    monkeypatch.setenv("MLX_RANK", "1")  # as mlx.launch starts a follower
    monkeypatch.setattr(lockstep, "join", lambda *args: pytest.fail("joined without a secret"))
    with pytest.raises(CommandError, match="DISTRIBUTED_SECRET"):
        call_command("serve", "--follower")
