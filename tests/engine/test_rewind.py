"""rewind.py's parts on their own: what is saved survives MLX's in-place operators, and a
verification without layers that cannot drop positions is left alone. The models that replay
(hybrid, sliding windows) are in tests/engine/test_architecture_matrix.py."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models.cache import ArraysCache, BatchKVCache, BatchRotatingKVCache, CacheList

from inference.engine.rewind import Rewind, Saved, cut_layers, kept_layers, leaves

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent


def test_saved_state_survives_in_place_updates():
    state = ArraysCache(2)
    state[0] = mx.ones((2, 3))
    state.lengths = mx.array([3, 1])
    saved = Saved([state])
    state.lengths -= 1  # MLX updates the array object itself
    state[0][0] = 5.0
    state[1] = mx.zeros((2, 4))
    saved.restore()
    assert state.lengths.tolist() == [3, 1]
    assert state[0].tolist() == [[1.0] * 3] * 2
    assert state[1] is None


def test_layers_are_sorted_into_those_that_cut_and_those_that_replay():
    kv, window, recurrent = BatchKVCache([0, 0]), BatchRotatingKVCache(8, [0, 0]), ArraysCache(2)
    cache = [kv, CacheList(recurrent, BatchKVCache([0, 0])), window]
    assert len(leaves(cache)) == 4
    assert cut_layers(cache) == [kv, cache[1].caches[1]]
    assert kept_layers(cache) == [recurrent, window]


def test_a_plain_kv_model_is_not_bracketed():
    kv = BatchKVCache([0, 0])
    rewind = Rewind([kv], [3, 1])
    assert not rewind.needs_replay
    assert kv.__dict__.get("_right_padding") is None  # its padding is roll_back's


def test_each_row_s_length_masks_its_padding_out_of_recurrent_state():
    state = ArraysCache(2)
    rewind = Rewind([state], [3, 1])
    assert rewind.needs_replay
    assert state.make_mask(3).tolist() == [[True, True, True], [True, False, False]]
    rewind.settle()
    assert state.lengths is None
    rewind.back([2, 2])  # the same widths: nothing to mask
    assert state.lengths is None and state.make_mask(2) is None


def test_a_window_fed_several_positions_drops_what_each_row_did_not_keep():
    """A sliding window needs no replay: after a verification its rows' rejected positions are
    rolled to their fronts as padding, and the window holds the same positions as one fed only
    the kept tokens."""
    window = 4
    fed, twin = BatchRotatingKVCache(window, [0, 0]), BatchRotatingKVCache(window, [0, 0])
    history = mx.arange(2 * 6 * 2, dtype=mx.float32).reshape(2, 1, 6, 2)
    for cache in (fed, twin):
        cache.update_and_fetch(history, history)
    step = mx.arange(100, 100 + 2 * 3 * 2, dtype=mx.float32).reshape(2, 1, 3, 2)
    rewind = Rewind([fed], [3, 3])
    assert not rewind.needs_replay
    fed.update_and_fetch(step, step)
    rewind.cut_windows([3, 1])  # row 0 keeps all three, row 1 only its first
    twin.prepare(lengths=[3, 1], right_padding=[0, 2])
    twin.update_and_fetch(step, step)
    twin.finalize()
    assert mx.array_equal(fed.keys, twin.keys) and fed.offset.tolist() == twin.offset.tolist()
    assert fed.left_padding.tolist() == twin.left_padding.tolist()
