"""The kernels' gated delta rule (kernels/src/recurrence.cpp): Qwen3.5's and Qwen3-Next's
linear attention, as mlx-lm's ops compute it on the CPU (seven whole-state operations a
token), and the route that sends mlx-lm's `gated_delta_update` there; and the depthwise
convolution before it, which MLX's CPU backend runs as one BLAS call per channel."""

from __future__ import annotations

import cpu_kernels as ck
import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.models import gated_delta, qwen3_5

from inference.engine import cpu
from inference.engine.cpu import hooks
from inference.engine.cpu.layers import KernelDepthwiseConv1d

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent


def inputs(batch: int, steps: int, key_heads: int, value_heads: int, dk: int, dv: int, seed=0):
    keys = mx.random.split(mx.random.key(seed), 6)
    q = mx.random.normal((batch, steps, key_heads, dk), key=keys[0])
    k = mx.random.normal((batch, steps, key_heads, dk), key=keys[1])
    q, k = gated_delta.normalize_qk(q, k, inv_scale=dk**-0.5, eps=1e-6)
    v = mx.random.normal((batch, steps, value_heads, dv), key=keys[2])
    g = mx.random.uniform(0.5, 1.0, (batch, steps, value_heads), key=keys[3])
    beta = mx.random.uniform(0.0, 1.0, (batch, steps, value_heads), key=keys[4])
    state = mx.random.normal((batch, value_heads, dv, dk), key=keys[5]) * 0.1
    return q, k, v, g, beta, state


def kernel(q, k, v, g, beta, state, mask=None):
    flat = ck.gated_delta(q, k, v, g, beta, state, mask)
    kept = state.size
    y = flat[kept:].reshape(*v.shape[:2], *v.shape[2:])
    return y, flat[:kept].reshape(state.shape)


def close(ours: mx.array, theirs: mx.array) -> bool:
    return mx.allclose(ours, theirs, rtol=1e-4, atol=1e-5).item()


@pytest.mark.parametrize(
    "batch, steps, key_heads, value_heads, dk, dv",
    [
        (1, 1, 2, 2, 32, 32),  # a decode step
        (1, 9, 2, 4, 64, 32),  # a prompt, two value heads per key head (Qwen3.5)
        (3, 5, 4, 8, 128, 128),  # a batch at Qwen3.5's head sizes
        (2, 4, 1, 3, 16, 24),  # sizes no vector width divides
    ],
)
def test_the_kernel_computes_mlx_lms_recurrence(batch, steps, key_heads, value_heads, dk, dv):
    args = inputs(batch, steps, key_heads, value_heads, dk, dv)
    y, state = kernel(*args)
    theirs_y, theirs_state = gated_delta.gated_delta_ops(*args)
    assert close(y, theirs_y) and close(state, theirs_state)


def test_a_masked_step_leaves_the_state_and_is_still_read():
    """Left padding in a batch: where the mask is false the state is as before the step."""
    args = inputs(2, 6, 2, 4, 32, 32, seed=3)
    mask = mx.array([[False, False, True, True, True, True], [True] * 6])
    y, state = kernel(*args, mask=mask)
    theirs_y, theirs_state = gated_delta.gated_delta_ops(*args, mask=mask)
    assert close(y, theirs_y) and close(state, theirs_state)


def test_steps_one_at_a_time_give_what_one_call_gives():
    """A prompt read in one call and the same tokens decoded one by one: the same state."""
    q, k, v, g, beta, state = inputs(1, 5, 2, 4, 32, 32, seed=5)
    whole_y, whole = kernel(q, k, v, g, beta, state)
    ys = []
    for t in range(5):
        y, state = kernel(q[:, t : t + 1], k[:, t : t + 1], v[:, t : t + 1],
                          g[:, t : t + 1], beta[:, t : t + 1], state)  # fmt: skip
        ys.append(y)
    assert mx.array_equal(mx.concatenate(ys, axis=1), whole_y).item()
    assert mx.array_equal(state, whole).item()


def test_the_kernel_refuses_shapes_it_cannot_read():
    q, k, v, g, beta, state = inputs(1, 2, 2, 4, 16, 16)
    with pytest.raises(ValueError, match="one gate per value head"):
        ck.gated_delta(q, k, v, g[..., None], beta, state)
    with pytest.raises(ValueError, match="state must be"):
        ck.gated_delta(q, k, v, g, beta, state[:, :2])


def test_the_route_computes_mlx_lms_update_and_leaves_a_vector_gate_to_it(monkeypatch):
    cpu.kernel_status()
    calls = []
    monkeypatch.setattr(hooks.ext, "gated_delta", _counting(hooks.ext.gated_delta, calls))
    q, k, v, _, _, state = inputs(2, 3, 2, 4, 32, 32, seed=7)
    a = mx.random.normal((2, 3, 4), key=mx.random.key(8))
    b = mx.random.normal((2, 3, 4), key=mx.random.key(9))
    a_log, dt_bias = mx.log(mx.array([1.0, 2.0, 4.0, 8.0])), mx.ones(4)
    for gating in ({}, {"lower_bound": -5.0}, {"allow_neg_eigval": True}):
        ours = hooks.gated_delta_update(q, k, v, a, b, a_log, dt_bias, state, **gating)
        theirs = hooks.MLX_GATED_DELTA(q, k, v, a, b, a_log, dt_bias, state, **gating)
        assert all(close(x, y) for x, y in zip(ours, theirs, strict=True))
    assert len(calls) == 3
    vector_a = mx.random.normal((2, 3, 4, 32), key=mx.random.key(10))  # Kimi's gate per key
    ours = hooks.gated_delta_update(q, k, v, vector_a, b, a_log[:, None], dt_bias[:, None], state)
    theirs = hooks.MLX_GATED_DELTA(q, k, v, vector_a, b, a_log[:, None], dt_bias[:, None], state)
    assert all(mx.array_equal(x, y).item() for x, y in zip(ours, theirs, strict=True))
    assert len(calls) == 3


def test_a_qwen35_model_routes_its_recurrence_to_the_kernel(monkeypatch):
    cpu.kernel_status()
    assert hooks.install(qwen3_5.Model(_tiny_args()))["gated_delta_update"] >= 1
    assert qwen3_5.gated_delta_update is hooks.gated_delta_update
    calls = []
    monkeypatch.setattr(hooks.ext, "gated_delta", _counting(hooks.ext.gated_delta, calls))
    model = qwen3_5.Model(_tiny_args())
    model(mx.array([[1, 2, 3, 4]]))
    assert len(calls) == 1  # its one linear-attention layer, the whole prompt at once


def _tiny_args() -> qwen3_5.ModelArgs:
    return qwen3_5.ModelArgs.from_dict(
        {"model_type": "qwen3_5", "hidden_size": 64, "num_hidden_layers": 2,
         "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
         "linear_key_head_dim": 16, "linear_value_head_dim": 16, "vocab_size": 100,
         "full_attention_interval": 2, "tie_word_embeddings": True}
    )  # fmt: skip


def _counting(function, calls: list):
    def counted(*args, **kwargs):
        calls.append(args)
        return function(*args, **kwargs)

    return counted


@pytest.mark.parametrize(
    "batch, length, channels, taps, padding",
    [(1, 4, 8192, 4, 0), (2, 9, 96, 4, 0), (1, 7, 33, 3, 2), (3, 40, 64, 4, 3)],
)
def test_the_depthwise_convolution_computes_mlxs(batch, length, channels, taps, padding):
    """The short convolution before the recurrence (and Mamba's scan, LFM2's gate)."""
    x = mx.random.normal((batch, length, channels), key=mx.random.key(1))
    w = mx.random.normal((channels, taps, 1), key=mx.random.key(2))
    ours = ck.depthwise_conv1d(x, w, padding)
    assert close(ours, mx.conv1d(x, w, padding=padding, groups=channels))


def test_the_depthwise_layer_replaces_one_filter_per_channel_only():
    cpu.kernel_status()
    depthwise = nn.Conv1d(64, 64, kernel_size=4, groups=64, bias=True)
    depthwise.bias = mx.random.normal((64,), key=mx.random.key(3))
    x = mx.random.normal((2, 7, 64), key=mx.random.key(4))
    swapped = cpu.layers._replacement(depthwise)
    assert isinstance(swapped, KernelDepthwiseConv1d) and close(swapped(x), depthwise(x))
    for other in (nn.Conv1d(64, 64, 4), nn.Conv1d(64, 64, 4, groups=64, stride=2),
                  nn.Conv1d(64, 128, 4, groups=64)):  # fmt: skip
        assert cpu.layers._replacement(other) is None
