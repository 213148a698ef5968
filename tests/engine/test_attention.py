"""Attention over K/V in any of the engine's formats (engine/attention.py): packed K/V are told
by their own shapes, not by the cache (Gemma 3n/4's KV-shared layers have none), attention
sinks work over them (gpt-oss), and the CPU kernels' dispatcher agrees with it."""

from __future__ import annotations

import mlx.core as mx
import pytest

from inference.engine import attention
from inference.engine.cpu import hooks
from inference.engine.cpu.ext import ext

pytestmark = pytest.mark.database_independent

SCALE = 0.125


def tensors(width: int, seed: int = 0, queries: int = 3, positions: int = 11):
    """Queries over 4 heads, K/V of 2 heads (grouped query attention), and 4 sinks."""
    mx.random.seed(seed)
    q = mx.random.normal((2, 4, queries, width))
    k = mx.random.normal((2, 2, positions, width))
    v = mx.random.normal((2, 2, positions, width))
    sinks = mx.random.normal((4,))
    return q, k, v, sinks


def packed(x: mx.array, group: int, bits: int):
    return tuple(mx.quantize(x, group_size=group, bits=bits))


def widened(p, group: int, bits: int) -> mx.array:
    return mx.dequantize(*p, group_size=group, bits=bits)


@pytest.mark.parametrize(("group", "bits"), [(64, 8), (64, 4), (32, 8), (32, 4)])
def test_packing_is_read_from_the_shapes(group, bits):
    q, k, _, _ = tensors(64)
    assert attention.packing(q, packed(k, group, bits)) == (bits, group)


@pytest.mark.parametrize("mask", [None, "causal"])
@pytest.mark.parametrize(("group", "bits"), [(64, 8), (32, 4)])
def test_sinks_over_packed_kv_match_fused_attention_over_their_values(mask, group, bits):
    q, k, v, sinks = tensors(64)
    pk, pv = packed(k, group, bits), packed(v, group, bits)
    got = attention.attention(q, pk, pv, cache=None, scale=SCALE, mask=mask, sinks=sinks)
    want = mx.fast.scaled_dot_product_attention(
        q, widened(pk, group, bits), widened(pv, group, bits), scale=SCALE, mask=mask, sinks=sinks
    )
    assert got.shape == want.shape
    assert mx.allclose(got, want, atol=1e-4).item()


def test_sinks_change_the_answer():
    q, k, v, sinks = tensors(64)
    pk, pv = packed(k, 64, 8), packed(v, 64, 8)
    plain = attention.attention(q, pk, pv, scale=SCALE, mask="causal")
    sunk = attention.attention(q, pk, pv, scale=SCALE, mask="causal", sinks=sinks * 4)
    assert not mx.allclose(plain, sunk, atol=1e-3).item()


def test_a_boolean_mask_over_packed_kv():
    q, k, v, _ = tensors(64)
    keep = mx.random.uniform(shape=(2, 1, 3, 11)) > 0.3
    keep[..., 0] = True  # every query sees something
    pk, pv = packed(k, 64, 8), packed(v, 64, 8)
    got = attention.attention(q, pk, pv, scale=SCALE, mask=keep)
    want = mx.fast.scaled_dot_product_attention(
        q, widened(pk, 64, 8), widened(pv, 64, 8), scale=SCALE, mask=keep
    )
    assert mx.allclose(got, want, atol=1e-4).item()


def test_packed_kv_without_a_cache_are_attended_over():
    # A KV-shared layer gets an earlier layer's packed K/V and no cache of its own.
    q, k, v, _ = tensors(64)
    pk, pv = packed(k, 64, 4), packed(v, 64, 4)
    got = attention.attention(q, pk, pv, cache=None, scale=SCALE, mask="causal")
    want = mx.fast.scaled_dot_product_attention(
        q, widened(pk, 64, 4), widened(pv, 64, 4), scale=SCALE, mask="causal"
    )
    assert mx.allclose(got, want, atol=1e-4).item()


@pytest.mark.skipif(ext is None, reason="the CPU kernels are not built on this machine")
def test_the_kernels_dispatcher_reads_packed_kv_without_a_cache():
    q, k, v, sinks = tensors(64, queries=1)
    pk, pv = packed(k, 64, 8), packed(v, 64, 8)
    kernel = hooks.attention(q, pk, pv, cache=None, scale=SCALE, mask=None)
    generic = attention.attention(q, pk, pv, scale=SCALE, mask=None)
    assert mx.allclose(kernel, generic, atol=1e-3).item()
    # Sinks are not the kernel's: the dispatcher hands them to the engine's attention.
    with_sinks = hooks.attention(q, pk, pv, cache=None, scale=SCALE, mask=None, sinks=sinks)
    want = attention.attention(q, pk, pv, scale=SCALE, mask=None, sinks=sinks)
    assert mx.allclose(with_sinks, want, atol=1e-5).item()


def test_packed_attention_leaves_the_queries_as_they_were():
    # mlx-lm's quantized attention scales its queries in place; a caller's stay as they were.
    q, k, v, _ = tensors(64)
    before = mx.array(q)
    attention.attention(q, packed(k, 64, 8), packed(v, 64, 8), scale=SCALE, mask="causal")
    assert mx.array_equal(q, before).item()


def test_a_routed_swiglu_falls_back_to_mlx_s_own(architecture_dir):
    # gpt-oss holds a SwigluOAI module of mlx-lm's activations.py, so routing reaches that
    # module's own `swiglu`: the fallback must be mlx-lm's function, not that name (which
    # recursed once a later model ran with the kernels off).
    import mlx.nn as nn
    from mlx_lm import load
    from mlx_lm.models import activations

    model, _ = load(str(architecture_dir("gpt_oss")))
    hooks.install(model)
    assert activations.swiglu is hooks.swiglu
    gate = mx.linspace(-2, 2, 8).reshape(2, 4).astype(mx.float16)  # not the kernel's: float16
    assert mx.allclose(activations.swiglu(gate, gate), nn.silu(gate) * gate).item()
