"""The prefix cache hands a conversation's entry to its next turn instead of sharing it: the
turn grows its KV in the entry's own buffers (KV caches keep a quarter's room, a prompt's
sized from its first chunk), and the prompt a decoding sequence has read is found by other
prompts without being copied until one wants it. Texts always equal the same prompt read
alone."""

from __future__ import annotations

import numpy as np
import pytest

from inference.engine import kv
from inference.engine.batching import ModelRunner
from inference.engine.config import EngineConfig
from inference.engine.pool import LoadedModel
from tests.engine.jobs import greedy, make_sequence
from tests.engine.test_runner import LONG, alone, drain, ids_of, loaded, run

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

__all__ = ["loaded"]  # the module's model, shared with test_runner


def entry(runner: ModelRunner, tokens: list[int]) -> list:
    cache = runner.prefixes
    assert cache is not None
    return cache._memory._trie.get(cache.model_id, tokens).prompt_cache


def address(layer) -> int:
    """Where the layer's keys live (a view made and dropped: it would pin the buffer)."""
    view = np.asarray(layer.keys)
    where = view.__array_interface__["data"][0]
    del view
    return where


def settle(runner: ModelRunner) -> None:
    """As the engine's next turn does: the finished answers' KV is kept."""
    while runner.busy:
        runner.step()


def test_capacity_gives_a_quarter_s_room_in_whole_steps():
    assert kv.capacity(1) == 256
    assert kv.capacity(1600) == 2048  # 2,000 rounded up
    assert kv.capacity(2033) == 2560
    for needed in (1, 255, 256, 257, 1000, 5000):
        assert kv.capacity(needed) >= needed * 1.25 and kv.capacity(needed) % 256 == 0


def test_a_conversation_s_next_turn_grows_its_kv_in_place(loaded: LoadedModel):
    runner = ModelRunner(loaded, EngineConfig())
    ids = ids_of(loaded, LONG)
    (first,) = run(runner, make_sequence(loaded, ids, greedy(6)))
    settle(runner)
    conversation = ids + first.tokens
    before = [address(layer) for layer in entry(runner, conversation)]
    follow_up = conversation + ids_of(loaded, " And then?")
    (second,) = run(runner, make_sequence(loaded, follow_up, greedy(5)))
    settle(runner)
    assert second.done.cached_tokens == len(conversation)
    assert second.tokens == alone(loaded, follow_up, 5).tokens
    after = entry(runner, follow_up + second.tokens)
    assert [address(layer) for layer in after] == before  # the same buffers: nothing copied


def test_a_prompt_sharing_a_decoding_one_s_finds_its_prefix(loaded: LoadedModel):
    runner = ModelRunner(loaded, EngineConfig())
    ids = ids_of(loaded, LONG)
    first = make_sequence(loaded, ids, greedy(12))
    runner.add(first)
    for _ in range(200):
        if first.completion_tokens >= 2:
            break
        runner.step()
    other = ids + ids_of(loaded, " Something else.")
    second = make_sequence(loaded, other, greedy(5))
    runner.add(second)
    one, two = drain(runner, first, second)
    assert two.done.cached_tokens == len(ids) - 1  # the prompt first read, but its last
    assert two.tokens == alone(loaded, other, 5).tokens
    assert one.tokens == alone(loaded, ids, 12).tokens  # copied out of it, it went on as it was


def test_two_turns_continuing_one_conversation_both_find_it(loaded: LoadedModel):
    """The first is handed the entry; the second, added before either reads, copies it out of
    the first's hands."""
    runner = ModelRunner(loaded, EngineConfig())
    ids = ids_of(loaded, LONG)
    (first,) = run(runner, make_sequence(loaded, ids, greedy(6)))
    settle(runner)
    conversation = ids + first.tokens
    turns = [conversation + ids_of(loaded, text) for text in (" And then?", " Why not?")]
    sequences = [make_sequence(loaded, turn, greedy(5)) for turn in turns]
    outcomes = run(runner, *sequences)
    assert [o.done.cached_tokens for o in outcomes] == [len(conversation)] * 2
    for outcome, turn in zip(outcomes, turns, strict=True):
        assert outcome.tokens == alone(loaded, turn, 5).tokens


@pytest.mark.parametrize("where", ["decoding", "reading"])
def test_a_cancelled_turn_leaves_what_it_had_read_or_been_handed(loaded: LoadedModel, where):
    runner = ModelRunner(loaded, EngineConfig(prefill_step=32))
    ids = ids_of(loaded, LONG)
    (first,) = run(runner, make_sequence(loaded, ids, greedy(6)))
    settle(runner)
    conversation = ids + first.tokens
    more = " ".join(f"more {i}," for i in range(30))
    follow_up = conversation + ids_of(loaded, more)  # read over several steps
    turn = make_sequence(loaded, follow_up, greedy(20))
    runner.add(turn)
    runner.step()
    if where == "decoding":
        for _ in range(200):
            if turn.completion_tokens:
                break
            runner.step()
    assert (turn.completion_tokens > 0) == (where == "decoding")
    runner.cancel([turn])
    kept = len(follow_up) - 1 if where == "decoding" else len(conversation)
    later = follow_up[:kept] + ids_of(loaded, " Once more.")
    (again,) = run(runner, make_sequence(loaded, later, greedy(4)))
    assert again.done.cached_tokens == kept
    assert again.tokens == alone(loaded, later, 4).tokens


def test_a_row_that_shared_its_batch_is_copied_out_to_its_own(loaded: LoadedModel):
    """Handed back whole, a short row that outlived a long one would keep a view into the
    batch's buffer, the long one's room pinned in the prefix cache."""
    runner = ModelRunner(loaded, EngineConfig())
    short, long = ids_of(loaded, "Hello there."), ids_of(loaded, LONG)
    outcomes = run(
        runner, make_sequence(loaded, short, greedy(30)), make_sequence(loaded, long, greedy(2))
    )
    settle(runner)
    kept = entry(runner, short + outcomes[0].tokens)
    assert all(layer.keys.shape[2] == layer.offset for layer in kept)  # exact: a copy
    assert outcomes[0].tokens == alone(loaded, short, 30).tokens


def test_a_prompt_read_in_chunks_allocates_its_kv_once(loaded: LoadedModel):
    """Room for the prompt and some answer from the first chunk: grown chunk by chunk, each
    growth was a new buffer and a copy of the old."""
    runner = ModelRunner(loaded, EngineConfig(prefill_step=32))
    ids = ids_of(loaded, LONG)
    sequence = make_sequence(loaded, ids, greedy(8))
    runner.add(sequence)
    shapes = []
    for _ in range(200):
        runner.step()
        cache = runner._prefill.cache_for(sequence)
        if cache is None:
            break
        shapes.append(cache[0].keys.shape[2])
    assert len(shapes) > 3 and set(shapes) == {kv.capacity(len(ids) + 8)}  # one buffer
