"""The attention kernel (cpu_kernels.attention / quantized_attention) against MLX's own
mx.fast.scaled_dot_product_attention, over every instruction set this CPU runs and every K/V
format the engine's caches hold: float32, float16, and mx.quantize's 8- and 4-bit layout."""

# Imported outright: a machine where kernels/ did not build fails here rather than skipping.
import cpu_kernels as ck
import mlx.core as mx
import pytest
from mlx_lm.models import base
from mlx_lm.models.cache import KVCache, QuantizedKVCache

from inference.engine.cpu import hooks
from inference.engine.cpu.status import configure, kernel_status

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

ISAS = [isa for isa in ("avx512", "avx2", "generic") if ck.use_isa(isa)]
ck.use_isa(ISAS[0])
FORMATS = ["float32", "float16", "8bit-g32", "8bit-g64", "4bit-g32", "4bit-g64"]


@pytest.fixture(params=ISAS)
def isa(request):
    assert ck.use_isa(request.param)
    yield request.param
    ck.use_isa(ISAS[0])


def close(ours, theirs, rtol=2e-5) -> bool:
    """Equal up to float32 summation order: the error is small next to the largest value."""
    scale = mx.abs(theirs).max().item() + 1e-12
    return (mx.abs(ours - theirs).max().item() / scale) < rtol


class KV:
    """One side (keys or values) in a format, as a cache holds it: the first `keys` positions
    of a longer buffer; `dense` is what the kernel should read (dequantized)."""

    def __init__(self, fmt: str, b: int, heads: int, keys: int, dim: int, seed: int):
        full = mx.random.normal((b, heads, keys + 37, dim), key=mx.random.key(seed))
        if fmt in ("float32", "float16"):
            held = full.astype(getattr(mx, fmt))
            self.parts = (held[..., :keys, :],)
            self.dense = self.parts[0].astype(mx.float32)
            self.bits = None
            return
        bits, group = int(fmt[0]), int(fmt.split("-g")[1])
        packed = mx.quantize(full, group_size=group, bits=bits)
        self.parts = tuple(x[..., :keys, :] for x in packed)
        self.dense = mx.dequantize(*self.parts, group_size=group, bits=bits)
        self.bits, self.group = bits, group


def ours(q, k: KV, v: KV, scale, mask):
    if k.bits is None:
        return ck.attention(q, k.parts[0], v.parts[0], scale=scale, mask=mask)
    return ck.quantized_attention(
        q, *k.parts, *v.parts, scale=scale, mask=mask, group_size=k.group, bits=k.bits
    )


def theirs(q, k: KV, v: KV, scale, mask):
    return mx.fast.scaled_dot_product_attention(q, k.dense, v.dense, scale=scale, mask=mask)


def check(fmt, b=2, hq=9, hkv=3, length=7, keys=103, dim=64, mask="causal", scale=0.125):
    q = mx.random.normal((b, hq, length, dim), key=mx.random.key(length))
    k = KV(fmt, b, hkv, keys, dim, seed=1)
    v = KV(fmt, b, hkv, keys, dim, seed=2)
    mask = mask(b, length, keys) if callable(mask) else mask
    assert close(ours(q, k, v, scale, mask), theirs(q, k, v, scale, mask))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("length", "keys"), [(1, 103), (3, 103), (7, 103), (40, 300)])
@pytest.mark.parametrize("mask", [None, "causal"])
def test_matches_mlx_for_every_format(isa, fmt, length, keys, mask):
    check(fmt, length=length, keys=keys, mask=mask)


@pytest.mark.parametrize("fmt", ["float32", "float16", "8bit-g64", "4bit-g32"])
def test_long_prompt_over_a_prefix(fmt):
    # Query blocks, tiles of keys past the diagonal and a final partial tile and block.
    check(fmt, b=1, length=150, keys=1000, mask="causal")


@pytest.mark.parametrize("fmt", ["float32", "float16", "4bit-g64"])
@pytest.mark.parametrize("length", [1, 20])
@pytest.mark.parametrize("mask", ["causal", "bool"])
def test_keys_split_between_threads(isa, fmt, length, mask):
    # One sequence, few units: the keys are split in ranges whose parts are combined.
    if mask == "bool":
        mask = batch_mask("bool")
    check(fmt, b=1, length=length, keys=1500, mask=mask)


def batch_mask(kind: str):
    """mlx-lm's BatchKVCache mask: causal with each row's left padding hidden."""

    def make(b, length, keys):
        pads = mx.array([0, 5, 17][:b])
        allowed = base.create_causal_mask(length, offset=keys - length, left_padding=pads)
        if kind == "bool":
            return allowed
        return mx.where(allowed, 0.0, -mx.inf)

    return make


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", ["bool", "additive"])
@pytest.mark.parametrize("length", [1, 20])
def test_batched_rows_with_left_padding(isa, fmt, kind, length):
    check(fmt, b=3, length=length, keys=64 + length, mask=batch_mask(kind))


@pytest.mark.parametrize("fmt", ["float32", "float16"])
@pytest.mark.parametrize("dim", [128, 80, 48])  # 80, 48: not whole vectors of features
@pytest.mark.parametrize("length", [1, 20])
def test_other_head_sizes(isa, fmt, dim, length):
    check(fmt, dim=dim, length=length, keys=70)


@pytest.mark.parametrize("fmt", ["8bit-g32", "4bit-g32"])
def test_quantized_head_of_three_groups(isa, fmt):
    check(fmt, dim=96, length=5, keys=70)


@pytest.mark.parametrize(("hq", "hkv"), [(4, 4), (8, 1), (6, 2), (64, 1)])
def test_any_grouping_of_query_heads(isa, hq, hkv):
    for length in (1, 9):
        check("float16", b=1, hq=hq, hkv=hkv, length=length, keys=40)


def test_float16_rows_that_are_not_contiguous():
    q = mx.random.normal((1, 9, 4, 64))
    k = mx.random.normal((1, 3, 50, 128)).astype(mx.float16)[..., ::2]
    v = mx.random.normal((1, 50, 3, 64)).astype(mx.float16).transpose(0, 2, 1, 3)
    out = ck.attention(q, k, v, scale=0.1, mask="causal")
    dense = (k.astype(mx.float32), v.astype(mx.float32))
    assert close(out, mx.fast.scaled_dot_product_attention(q, *dense, scale=0.1, mask="causal"))


@pytest.mark.parametrize("fmt", ["float16", "8bit-g64"])
@pytest.mark.parametrize("length", [2, 20])
def test_rows_whose_keys_are_all_hidden_give_zeros(isa, fmt, length):
    q = mx.random.normal((1, 9, length, 64))
    k, v = KV(fmt, 1, 3, 70, 64, seed=1), KV(fmt, 1, 3, 70, 64, seed=2)
    hidden = mx.ones((1, 1, length, 70), dtype=mx.bool_)
    hidden[..., 0, :] = False
    out = ours(q, k, v, 0.125, hidden)
    assert mx.array_equal(out[:, :, 0], mx.zeros_like(out[:, :, 0])).item()
    assert close(out[:, :, 1:], theirs(q[:, :, 1:], k, v, 0.125, hidden[:, :, 1:]))


def test_refuses_what_it_cannot_read():
    q = mx.random.normal((1, 9, 1, 64))
    k, v = KV("8bit-g64", 1, 3, 10, 64, seed=1), KV("8bit-g64", 1, 3, 10, 64, seed=2)
    with pytest.raises(ValueError, match="bits"):
        ck.quantized_attention(q, *k.parts, *v.parts, scale=1.0, group_size=64, bits=3)
    with pytest.raises(ValueError, match="shapes"):
        ck.quantized_attention(q, *k.parts, *v.parts, scale=1.0, group_size=64, bits=4)


# ---- the dispatcher mlx-lm's model code reaches (inference/engine/cpu/hooks.py) ----------


@pytest.fixture
def kernels_on():
    configure(enabled=True)
    assert kernel_status().available
    yield
    configure(enabled=True)


def filled(cache, b: int, keys: int, dim: int = 64, dtype=mx.float16):
    k = mx.random.normal((b, 3, keys, dim), key=mx.random.key(1)).astype(dtype)
    v = mx.random.normal((b, 3, keys, dim), key=mx.random.key(2)).astype(dtype)
    return cache.update_and_fetch(k, v)


@pytest.mark.parametrize("length", [1, 12])
def test_hook_runs_float16_caches_in_the_kernel(kernels_on, length):
    cache = KVCache()
    filled(cache, 1, 300)
    q = mx.random.normal((1, 9, length, 64))
    keys, values = filled(cache, 1, length)
    out = hooks.attention(q, keys, values, cache=cache, scale=0.125, mask="causal")
    assert out.dtype == mx.float32
    assert mx.array_equal(out, ck.attention(q, keys, values, scale=0.125, mask="causal")).item()
    reference = base.scaled_dot_product_attention(
        q, keys.astype(mx.float32), values.astype(mx.float32), None, 0.125, "causal"
    )
    assert close(out, reference)


@pytest.mark.parametrize(("bits", "group"), [(8, 64), (4, 32)])
def test_hook_runs_quantized_caches_in_the_kernel(kernels_on, bits, group):
    cache = QuantizedKVCache(group_size=group, bits=bits)
    filled(cache, 1, 300, dtype=mx.float32)
    q = mx.random.normal((1, 9, 12, 64))
    keys, values = filled(cache, 1, 12, dtype=mx.float32)
    out = hooks.attention(q, keys, values, cache=cache, scale=0.125, mask="causal")
    kernel = ck.quantized_attention(
        q, *keys, *values, scale=0.125, mask="causal", group_size=group, bits=bits
    )
    assert mx.array_equal(out, kernel).item()
    # mlx-lm's own quantized attention on the same tuples (float32 throughout)
    reference = base.scaled_dot_product_attention(q, keys, values, cache, 0.125, "causal")
    assert close(out, reference, rtol=1e-4)


def test_hook_leaves_float16_queries_to_mlx_lm(kernels_on):
    cache = KVCache()
    keys, values = filled(cache, 1, 20)
    q = mx.random.normal((1, 9, 20, 64)).astype(mx.float16)
    out = hooks.attention(q, keys, values, cache=cache, scale=0.125, mask="causal")
    assert out.dtype == mx.float16
