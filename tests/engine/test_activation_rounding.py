"""8-bit activations on the integer paths (x_bytes=1, the catalog's `activations: 8bit`): each
activation rounded per block to one byte, as llama.cpp's Q8 activations, instead of two. Exact
for what it rounds, a row alike in any batch (speculative verification), the prompts' integer
tiles rounding alike, the float paths untouched, refused values refused, and the layers, fused
blocks and experts all passing it."""

from __future__ import annotations

import cpu_kernels as ck
import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.models import qwen3, qwen3_moe
from mlx_lm.models.cache import make_prompt_cache

from inference.engine import cpu
from tests.engine.test_fused_layer import QWEN3_ARGS, QWEN3_MOE_ARGS
from tests.engine.test_int8_matmul import DIRECT, INT8_ISAS, ISAS, quantized, relative

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

DTYPES = (mx.float16, mx.bfloat16, mx.float32)
ROWS = (1, 2, 3, 4, 5, 8, 15)


def rounded8(x: mx.array, group: int) -> mx.array:
    """x as the one-byte path sees it: per block of `group`, round(x * 127 / max|x|) times
    max|x| / 127, in float32 as the kernel computes them."""
    blocks = x.reshape(*x.shape[:-1], -1, group)
    amax = mx.abs(blocks).max(axis=-1, keepdims=True)
    t = blocks * mx.where(amax > 0, mx.array(127.0) / amax, mx.array(0.0))
    return (mx.round(t) * (amax / 127.0)).reshape(x.shape)


@pytest.fixture(params=DIRECT)
def direct(request):
    """The direct path forced on for every row count, under each instruction set with one."""
    assert ck.use_isa(request.param)
    ck.use_int8("direct")
    yield request.param
    ck.use_int8("auto")
    ck.use_isa(ISAS[0])


def evaluated(out: mx.array) -> mx.array:
    mx.eval(out)  # under the fixture's mode: evaluation is lazy
    return out


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group", [32, 64, 128])
def test_one_byte_is_exact_for_what_it_rounds(direct, bits, group):
    k, n = group * 24, 37  # 37 columns: blocks of four and a tail of one
    for i, m in enumerate(ROWS):
        x = mx.random.normal((m, k), key=mx.random.key(m)) * 3
        w, s, b = quantized(n, k, bits, group, DTYPES[i % 3], seed=m + bits)
        ours = evaluated(ck.quantized_matmul(x, w, s, b, group, bits, x_bytes=1))
        exact = mx.quantized_matmul(rounded8(x, group), w, s, b, group_size=group, bits=bits)
        assert relative(ours, exact) < 5e-5, (direct, m)
        # One byte's rounding (1/254 of a block's largest) of the float product, no better.
        theirs = mx.quantized_matmul(x, w, s, b, group_size=group, bits=bits)
        assert 1e-4 < relative(ours, theirs) < 3e-2, (direct, m)
        two = evaluated(ck.quantized_matmul(x, w, s, b, group, bits))
        assert relative(two, theirs) < 1e-3


@pytest.mark.parametrize("bits", [4, 8])
def test_one_byte_computes_a_row_alike_in_any_batch(direct, bits):
    w, s, b = quantized(203, 2048, bits, 32, mx.float16, seed=11)
    x = mx.random.normal((9, 2048), key=mx.random.key(3))
    alone = [
        evaluated(ck.quantized_matmul(x[i : i + 1], w, s, b, 32, bits, x_bytes=1)) for i in range(9)
    ]
    for m in (2, 4, 5, 9):
        together = evaluated(ck.quantized_matmul(x[:m], w, s, b, 32, bits, x_bytes=1))
        for i in range(m):
            assert mx.array_equal(together[i : i + 1], alone[i]).item(), (m, i)


@pytest.mark.parametrize("bits", [4, 8])
def test_the_tiles_round_to_one_byte_when_asked(bits):
    """Prompts' integer tiles round as the direct path does with x_bytes=1 (half their integer
    products): exact for what they round, a row alike in any batch and on either path."""
    w, s, b = quantized(203, 2048, bits, 32, mx.float16, seed=5)
    x = mx.random.normal((67, 2048), key=mx.random.key(8)) * 3
    for isa in INT8_ISAS:
        assert ck.use_isa(isa)
        ck.use_int8("always")
        try:
            ours = evaluated(ck.quantized_matmul(x, w, s, b, 32, bits, x_bytes=1))
            rows = [
                evaluated(ck.quantized_matmul(x[:m], w, s, b, 32, bits, x_bytes=1)) for m in (5, 17)
            ]
        finally:
            ck.use_int8("auto")
        exact = mx.quantized_matmul(rounded8(x, 32), w, s, b, group_size=32, bits=bits)
        assert relative(ours, exact) < 5e-5, isa
        for part in rows:
            assert mx.array_equal(part, ours[: part.shape[0]]).item(), isa
        if isa in DIRECT:
            ck.use_int8("direct")
            try:
                direct = evaluated(ck.quantized_matmul(x[:4], w, s, b, 32, bits, x_bytes=1))
            finally:
                ck.use_int8("auto")
            assert relative(direct, ours[:4]) < 1e-6, isa
    ck.use_isa(ISAS[0])


def test_float_paths_ignore_x_bytes():
    """The float panels (AVX2's prompts) and the float path never round to one byte."""
    w, s, b = quantized(64, 2048, 4, 32, mx.float16, seed=2)
    x = mx.random.normal((64, 2048))
    for isa in ISAS:
        assert ck.use_isa(isa)
        for mode in ("panels", "never"):
            ck.use_int8(mode)
            try:
                one = evaluated(ck.quantized_matmul(x, w, s, b, 32, 4, x_bytes=1))
                two = evaluated(ck.quantized_matmul(x, w, s, b, 32, 4))
            finally:
                ck.use_int8("auto")
            assert mx.array_equal(one, two).item(), (isa, mode)
    ck.use_isa(ISAS[0])


def test_other_values_are_refused():
    w, s, b = quantized(8, 64, 4, 32, mx.float16, seed=1)
    x = mx.random.normal((1, 64))
    for bad in (0, 3, 4):
        with pytest.raises(ValueError, match="x_bytes must be 1 or 2"):
            ck.quantized_matmul(x, w, s, b, 32, 4, x_bytes=bad)
        with pytest.raises(ValueError, match="x_bytes must be 1 or 2"):
            ck.gather_quantized_matmul(
                x, mx.array([0]), w[None], s[None], b[None], 32, 4, x_bytes=bad
            )
    with pytest.raises(ValueError, match="8 or 15 bits"):
        cpu.round_activations(nn.Linear(4, 4), 4)


def test_experts_round_as_their_own_products(direct):
    w, s, b = (
        mx.stack([quantized(48, 1024, 4, 64, mx.float16, seed=e)[i] for e in range(4)])
        for i in range(3)
    )
    x = mx.random.normal((6, 1024), key=mx.random.key(7))
    experts = mx.array([2, 0, 2, 3, 1, 0])
    ours = evaluated(ck.gather_quantized_matmul(x, experts, w, s, b, 64, 4, x_bytes=1))
    for r, e in enumerate(experts.tolist()):
        one = evaluated(ck.quantized_matmul(x[r : r + 1], w[e], s[e], b[e], 64, 4, x_bytes=1))
        assert mx.array_equal(ours[r : r + 1], one).item(), r


def tiny(module, args: dict) -> nn.Module:
    mx.random.seed(5)
    model = module.Model(module.ModelArgs.from_dict(args))
    nn.quantize(model, group_size=64, bits=4)
    assert cpu.kernel_status().available, cpu.kernel_status().reason
    cpu.accelerate(model)
    return model


def decode(model: nn.Module, steps: int, fused: bool) -> list[mx.array]:
    cpu.use_fused(fused)
    try:
        cache, token, out = make_prompt_cache(model), mx.array([[7]]), []
        for _ in range(steps):
            out.append(model(token, cache=cache)[:, -1])
            mx.eval(out[-1])
            token = out[-1].argmax(axis=-1)[:, None]
        return out
    finally:
        cpu.use_fused(True)


@pytest.mark.parametrize("family", ["qwen3", "qwen3_moe"])
def test_layers_and_fused_blocks_round_as_they_are_set(direct, family):
    """round_activations sets every kernel layer; the fused blocks pass their linears'
    setting to their primitives, so fused and per-op decode stay bit for bit alike at 8 bits,
    and differ from 15 bits."""
    module, args = (qwen3, QWEN3_ARGS) if family == "qwen3" else (qwen3_moe, QWEN3_MOE_ARGS)
    model = tiny(module, args)
    layers = [m for _, m in model.named_modules() if isinstance(m, cpu.QuantizedKernelLayer)]
    assert cpu.round_activations(model, 8) == len(layers) > 0
    assert {m.x_bytes for m in layers} == {1}
    fused, plain = decode(model, 12, True), decode(model, 12, False)
    for a, b in zip(fused, plain, strict=True):
        assert mx.array_equal(a, b).item()
    assert cpu.round_activations(model, 15) == len(layers)
    fifteen = decode(model, 12, True)
    assert not all(mx.array_equal(a, b).item() for a, b in zip(fused, fifteen, strict=True))
    assert relative(fused[0], fifteen[0]) < 5e-2


def test_one_byte_takes_the_direct_path_for_more_rows_on_vnni():
    """AVX-512 VNNI's direct path halves its work a row with one byte: auto keeps it up to 16
    rows there (8 with two bytes), the same 15 on AVX2."""
    if "avx512" not in DIRECT or not ck.use_isa("avx512") or ck.direct_isa() != "avx512vnni":
        ck.use_isa(ISAS[0])
        pytest.skip("no AVX-512 VNNI on this CPU")  # AVX2's bound is the same 15 both ways
    try:
        w, s, b = quantized(96, 2048, 4, 32, mx.float16, seed=4)
        for m, two_direct in ((8, True), (12, False), (16, False)):
            x = mx.random.normal((m, 2048), key=mx.random.key(m))
            auto = {n: evaluated(ck.quantized_matmul(x, w, s, b, 32, 4, x_bytes=n)) for n in (1, 2)}
            ck.use_int8("direct")
            try:
                forced = {
                    n: evaluated(ck.quantized_matmul(x, w, s, b, 32, 4, x_bytes=n)) for n in (1, 2)
                }
            finally:
                ck.use_int8("auto")
            assert mx.array_equal(auto[1], forced[1]).item(), m
            assert mx.array_equal(auto[2], forced[2]).item() == two_direct, m
    finally:
        ck.use_isa(ISAS[0])
