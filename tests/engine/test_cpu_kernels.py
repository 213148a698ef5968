"""The CPU kernels (kernels/, the cpu_kernels module) against MLX's own operations."""

import random

# Imported outright: a machine where kernels/ did not build fails here rather than skipping.
import cpu_kernels as ck
import mlx.core as mx
import mlx.nn as nn
import pytest

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

ISAS = [isa for isa in ("avx512", "avx2", "generic") if ck.use_isa(isa)]
ck.use_isa(ISAS[0])


@pytest.fixture(params=ISAS)
def isa(request):
    """One instruction set's float path (the integer one, for many rows, rounds activations
    to int8: tests/engine/test_int8_matmul.py bounds it)."""
    assert ck.use_isa(request.param)
    ck.use_int8("never")
    yield request.param
    ck.use_int8("auto")
    ck.use_isa(ISAS[0])


def close(ours, theirs, rtol=2e-5) -> bool:
    """Equal up to float32 summation order: the error is small next to the largest value."""
    scale = mx.abs(theirs).max().item() + 1e-12
    return (mx.abs(ours - theirs).max().item() / scale) < rtol


def quantized(n, k, bits, group, dtype, seed):
    key = mx.random.key(seed)
    w, s, b = mx.quantize(mx.random.normal((n, k), key=key), group, bits)
    return w, s.astype(dtype), b.astype(dtype)


def matmul_cases(count=48, seed=3):
    rng = random.Random(seed)
    cases = [(1, 576, 1536, 4, 32), (32, 576, 1536, 4, 32), (64, 1536, 576, 8, 64)]
    for _ in range(count):
        bits, group = rng.choice((4, 8)), rng.choice((32, 64, 128))
        k = group * rng.choice((1, 2, 3, 5, 9))
        cases.append((rng.randint(1, 64), k, rng.choice((1, 3, 4, 5, 17, 100, 257)), bits, group))
    return cases


@pytest.mark.parametrize("m,k,n,bits,group", matmul_cases())
def test_quantized_matmul_matches_mlx(isa, m, k, n, bits, group):
    for dtype in (mx.float16, mx.bfloat16, mx.float32):
        w, s, b = quantized(n, k, bits, group, dtype, seed=m * n + k)
        x = mx.random.normal((m, k), key=mx.random.key(k))
        ours = ck.quantized_matmul(x, w, s, b, group, bits)
        theirs = mx.quantized_matmul(x, w, s, b, group_size=group, bits=bits)
        assert ours.dtype == mx.float32 and ours.shape == (m, n)
        assert close(ours, theirs), (isa, dtype)


def reference(x, w, s, b):
    return mx.quantized_matmul(x, w, s, b, group_size=32, bits=4)


@pytest.fixture
def float_path():
    ck.use_int8("never")
    yield
    ck.use_int8("auto")


@pytest.mark.usefixtures("float_path")
def test_quantized_matmul_takes_any_layout_and_leading_axes():
    w, s, b = quantized(96, 128, 4, 32, mx.float16, seed=1)
    x = mx.random.normal((128, 6), key=mx.random.key(2)).T  # not row-contiguous
    assert close(ck.quantized_matmul(x, w, s, b, 32, 4), reference(x, w, s, b))
    x3 = mx.random.normal((2, 3, 128))
    out = ck.quantized_matmul(x3, w, s, b, 32, 4)
    assert out.shape == (2, 3, 96)
    assert close(out, reference(x3, w, s, b))
    x16 = x3.astype(mx.float16)  # other dtypes compute in float32
    assert close(
        ck.quantized_matmul(x16, w, s, b, 32, 4), reference(x16.astype(mx.float32), w, s, b)
    )


def test_threads_split_columns_without_changing_a_bit():
    w, s, b = quantized(4096, 576, 4, 32, mx.float16, seed=5)
    x = mx.random.normal((8, 576))
    try:
        ck.set_threads(1)
        alone = ck.quantized_matmul(x, w, s, b, 32, 4)
        mx.eval(alone)
        ck.set_threads(2)
        assert ck.threads() == 2
        assert mx.array_equal(alone, ck.quantized_matmul(x, w, s, b, 32, 4)).item()
    finally:
        ck.set_threads(0)


@pytest.mark.parametrize(
    "args,message",
    [
        ((32, 3), "bits 3 with group size 32 is not supported"),
        ((16, 4), "bits 4 with group size 16 is not supported"),
    ],
)
def test_quantized_matmul_refuses_what_it_cannot_compute(args, message):
    w, s, b = quantized(8, 64, 4, 32, mx.float16, seed=0)
    with pytest.raises(ValueError, match=message):
        ck.quantized_matmul(mx.zeros((1, 64)), w, s, b, *args)
    with pytest.raises(ValueError, match="x has 65 features but the weights take 64"):
        ck.quantized_matmul(mx.zeros((1, 65)), w, s, b, 32, 4)
    with pytest.raises(ValueError, match="scales and biases"):
        ck.quantized_matmul(mx.zeros((1, 64)), w, s[:4], b, 32, 4)


def test_rms_norm_and_swiglu():
    x = mx.random.normal((3, 5, 576)) * 3
    w = mx.random.normal((576,))
    assert close(ck.rms_norm(x, w, 1e-5), mx.fast.rms_norm(x, w, 1e-5))
    strided = x.transpose(1, 0, 2)
    assert close(ck.rms_norm(strided, w, 1e-6), mx.fast.rms_norm(strided, w, 1e-6))
    gate = mx.concatenate([mx.random.normal((4, 1000)) * 4, mx.array([[-200.0, 200.0] * 500])])
    up = mx.random.normal(gate.shape)
    ours = ck.swiglu(gate, up)
    assert not mx.isnan(ours).any().item()
    assert close(ours, nn.silu(gate) * up)


@pytest.mark.parametrize("traditional", [True, False])
@pytest.mark.parametrize("offset", [0, 37, [3, 1000]])
def test_rope_matches_mlx(traditional, offset):
    x = mx.random.normal((2, 7, 9, 64)).transpose(0, 2, 1, 3)  # [B, H, L, D], strided
    off = mx.array(offset, dtype=mx.int32)
    # float32 angles: at position 1000 both are 3e-5 from a float64 reference, in their own ways
    rtol = 1e-4 if offset == [3, 1000] else 1e-5
    for dims, base, scale in ((64, 100000.0, 1.0), (32, 10000.0, 0.5)):
        ours = ck.rope(x, dims, traditional=traditional, base=base, scale=scale, offset=off)
        theirs = mx.fast.rope(x, dims, traditional=traditional, base=base, scale=scale, offset=off)
        assert close(ours, theirs, rtol=rtol)
    freqs = mx.random.uniform(1, 100, (32,))
    ours = ck.rope(x, 64, traditional=traditional, base=None, scale=1.0, offset=off, freqs=freqs)
    theirs = mx.fast.rope(
        x, 64, traditional=traditional, base=None, scale=1.0, offset=off, freqs=freqs
    )
    assert close(ours, theirs, rtol=rtol)
    three = mx.random.normal((2, 5, 64))  # [B, L, D]
    assert close(
        ck.rope(three, 64, traditional=traditional, base=1e4, scale=1.0, offset=off),
        mx.fast.rope(three, 64, traditional=traditional, base=1e4, scale=1.0, offset=off),
        rtol=rtol,
    )


def attention_inputs(b=2, hq=9, hkv=3, length=7, keys=103, d=64):
    q = mx.random.normal((b, hq, length, d))
    # k and v as a KV cache holds them: the first `keys` positions of a longer buffer
    k = mx.random.normal((b, hkv, 256, d))[..., :keys, :]
    v = mx.random.normal((b, hkv, 256, d))[..., :keys, :]
    return q, k, v


@pytest.mark.parametrize("length", [1, 7])
@pytest.mark.parametrize("mask", ["none", "causal", "bool", "additive"])
@pytest.mark.parametrize("head", [64, 128, 48])  # 48: the plain path for other head sizes
def test_attention_matches_mlx(isa, length, mask, head):
    q, k, v = attention_inputs(length=length, d=head)
    masks = {
        "none": None,
        "causal": "causal",
        "bool": mx.random.uniform(shape=(2, 1, length, 103)) > 0.3,
        "additive": mx.random.normal((length, 103)),
    }
    ours = ck.attention(q, k, v, scale=0.125, mask=masks[mask])
    theirs = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, mask=masks[mask])
    assert close(ours, theirs)


def test_attention_of_one_head_per_group_and_of_every_head_shared():
    for hq, hkv in ((4, 4), (8, 1), (6, 2)):
        q, k, v = attention_inputs(b=1, hq=hq, hkv=hkv, length=3, keys=9)
        ours = ck.attention(q, k, v, scale=0.3, mask="causal")
        assert close(ours, mx.fast.scaled_dot_product_attention(q, k, v, scale=0.3, mask="causal"))


def test_attention_takes_heads_whose_last_axis_is_strided():
    q = mx.random.normal((1, 9, 2, 128))[..., ::2]
    k = mx.random.normal((1, 3, 10, 128))[..., ::2]
    v = mx.random.normal((1, 3, 10, 64))
    ours = ck.attention(q, k, v, scale=0.1, mask="causal")
    assert close(ours, mx.fast.scaled_dot_product_attention(q, k, v, scale=0.1, mask="causal"))


def test_attention_gives_zeros_where_every_key_is_hidden():
    q, k, v = attention_inputs(b=1, length=2)
    hidden = mx.array([[[[False] * 103, [True] * 103]]])
    out = ck.attention(q, k, v, scale=0.125, mask=hidden)
    assert mx.array_equal(out[:, :, 0], mx.zeros_like(out[:, :, 0])).item()
    assert not mx.isnan(out).any().item()
