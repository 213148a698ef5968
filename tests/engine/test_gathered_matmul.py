"""The kernels' gathered product (kernels/src/gathered.cpp): a mixture's stacked experts,
each row of x through its own expert, as mx.gather_qmm computes it; and the layers that use it
in place of mlx-lm's QuantizedSwitchLinear (MoE experts) and QuantizedMultiLinear (MLA's
per-head matrices), which MLX's CPU backend runs as a scalar loop."""

from __future__ import annotations

import cpu_kernels as ck
import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.models.mla import MultiLinear
from mlx_lm.models.switch_layers import SwitchGLU, SwitchLinear

from inference.engine import cpu
from inference.engine.cpu.layers import KernelMultiLinear, KernelSwitchLinear

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

PATHS = ("auto", "direct", "panels", "never")  # as use_int8 names them


@pytest.fixture(params=PATHS)
def path(request):
    ck.use_int8(request.param)
    yield request.param
    ck.use_int8("auto")


def stacked(experts: int, n: int, k: int, bits: int, group: int, dtype: mx.Dtype, seed: int):
    w = mx.random.normal((experts, n, k), key=mx.random.key(seed)) * 0.05
    q, s, b = mx.quantize(w, group, bits)
    return q, s.astype(dtype), b.astype(dtype)


def relative(ours: mx.array, theirs: mx.array) -> float:
    return mx.abs(ours - theirs).max().item() / (mx.abs(theirs).max().item() + 1e-12)


CASES = [  # experts, columns, features, rows: decode (1-8 rows), verification, a prompt
    (e, n, k, r, bits, group, dtype)
    for e, n, k, r in ((4, 64, 128, 1), (16, 200, 1024, 8), (8, 48, 512, 13), (6, 96, 256, 70))
    for bits in (4, 8)
    for group, dtype in ((32, mx.float16), (64, mx.bfloat16), (128, mx.float32))
    if k % group == 0
]


@pytest.mark.parametrize("e,n,k,r,bits,group,dtype", CASES)
def test_each_row_goes_through_its_own_expert_as_gather_qmm(path, e, n, k, r, bits, group, dtype):
    w, s, b = stacked(e, n, k, bits, group, dtype, seed=r + k)
    x = mx.random.normal((r, k), key=mx.random.key(r))
    experts = mx.random.randint(0, e, (r,), key=mx.random.key(e))
    ours = ck.gather_quantized_matmul(x, experts, w, s, b, group, bits)
    theirs = mx.gather_qmm(
        x[:, None, :],
        w,
        s.astype(mx.float32),
        b.astype(mx.float32),
        rhs_indices=experts,
        transpose=True,
        group_size=group,
        bits=bits,
    )[:, 0, :]
    assert ours.shape == (r, n) and ours.dtype == mx.float32
    # The integer paths round activations to 8 bits per group (int8.h); floats only reorder.
    assert relative(ours, theirs) < (2e-6 if path in ("panels", "never") else 2e-3)


def test_a_row_gets_the_same_result_whatever_the_other_rows_and_their_experts():
    """Batched decoding and speculative verification rely on it: a row's result does not
    depend on which rows share its step or its expert."""
    w, s, b = stacked(8, 256, 1024, 4, 64, mx.float16, seed=1)
    x = mx.random.normal((12, 1024), key=mx.random.key(2))
    experts = mx.array([3, 3, 0, 7, 3, 1, 1, 5, 3, 0, 2, 6])
    whole = ck.gather_quantized_matmul(x, experts, w, s, b, 64, 4)
    for rows in (slice(0, 1), slice(1, 5), slice(8, 12)):
        part = ck.gather_quantized_matmul(x[rows], experts[rows], w, s, b, 64, 4)
        assert mx.array_equal(part, whole[rows])


def test_a_verification_computes_each_row_as_the_plain_step_would():
    """Speculative verification feeds n rows with their drafts under use_int8_rows(n): an
    expert that now holds more rows than the direct path's bound must still compute them as
    the plain step of n rows (at most n rows an expert) did."""
    w, s, b = stacked(4, 64, 768, 4, 64, mx.float16, seed=7)  # an expert's down projection
    x = mx.random.normal((40, 768), key=mx.random.key(8))
    experts = mx.zeros((40,), dtype=mx.int32)  # every row through expert 0
    plain = [ck.gather_quantized_matmul(x[i : i + 2], experts[:2], w, s, b, 64, 4) for i in (0, 38)]
    ck.use_int8_rows(2)
    try:
        verified = ck.gather_quantized_matmul(x, experts, w, s, b, 64, 4)
        mx.eval(verified)  # the setting applies where the product runs
    finally:
        ck.use_int8_rows(0)
    assert mx.array_equal(verified[:2], plain[0]) and mx.array_equal(verified[38:], plain[1])


def test_a_row_whose_expert_is_out_of_range_is_left_zero():
    w, s, b = stacked(4, 32, 128, 4, 64, mx.float16, seed=3)
    x = mx.random.normal((3, 128), key=mx.random.key(4))
    out = ck.gather_quantized_matmul(x, mx.array([1, 9, -1]), w, s, b, 64, 4)
    assert mx.abs(out[0]).max().item() > 0
    assert mx.array_equal(out[1:], mx.zeros((2, 32)))


@pytest.mark.parametrize(
    "args,message",
    [
        ({"experts": mx.zeros((2,), dtype=mx.int32)}, "one per row"),
        ({"experts": mx.zeros((3,))}, "integers"),
        ({"bits": 3}, "bits 4 or 8"),
        ({"x": mx.zeros((3, 100))}, "in_features"),
    ],
)
def test_wrong_arguments_are_refused_with_the_reason(args, message):
    w, s, b = stacked(4, 32, 128, 4, 64, mx.float16, seed=5)
    given = {"x": mx.zeros((3, 128)), "experts": mx.zeros((3,), dtype=mx.int32), "bits": 4}
    given.update(args)
    with pytest.raises(ValueError, match=message):
        ck.gather_quantized_matmul(given["x"], given["experts"], w, s, b, 64, given["bits"])


def quantized_glu(bias: bool) -> SwitchGLU:
    mx.random.seed(6)
    glu = SwitchGLU(256, 128, 8, bias=bias)
    if bias:
        for proj in (glu.gate_proj, glu.up_proj, glu.down_proj):
            proj.bias = mx.random.normal(proj.bias.shape) * 0.1
    nn.quantize(glu, group_size=64, bits=4)
    mx.eval(glu.parameters())
    return glu


@pytest.mark.parametrize("tokens", [1, 3, 40])  # 40 x 2 experts: mlx-lm sorts the rows itself
@pytest.mark.parametrize("bias", [False, True])  # gpt-oss's experts have biases
def test_a_mixture_of_experts_layer_computes_as_mlx_lm_s(tokens, bias):
    glu = quantized_glu(bias)
    x = mx.random.normal((2, tokens, 256), key=mx.random.key(7))
    indices = mx.random.randint(0, 8, (2, tokens, 2), key=mx.random.key(8))
    theirs = glu(x, indices)
    swapped = cpu.accelerate(glu)
    assert swapped["KernelSwitchLinear"] == 3 and not cpu.on_mlx_path(glu)
    ours = glu(x, indices)
    assert ours.shape == theirs.shape
    assert relative(ours, theirs) < 2e-3


def test_multi_linear_heads_compute_as_mlx_lm_s_either_way():
    """MLA's decode multiplies each head by its matrix (transposed); its prompt pass multiplies
    the latent by every head's matrix the other way."""
    mx.random.seed(9)
    multi = MultiLinear(128, 64, 4).to_quantized(group_size=64, bits=4)
    kernel = KernelMultiLinear(multi)
    q = mx.random.normal((2, 4, 1, 128), key=mx.random.key(10))
    latent = mx.random.normal((2, 1, 5, 64), key=mx.random.key(11))
    assert relative(kernel(q), multi(q)) < 2e-3
    assert relative(kernel(latent, transpose=False), multi(latent, transpose=False)) < 2e-6


def test_float32_twins_of_stacked_layers_are_mlx_lm_s_float_layers():
    """Timing a mixed model (compute_format.measure) swaps float32 copies in: the experts'
    twin is a SwitchLinear with the dequantized weights."""
    glu = quantized_glu(bias=True)
    cpu.accelerate(glu)
    x = mx.random.normal((1, 2, 256), key=mx.random.key(12))
    indices = mx.array([[[0, 5], [7, 5]]])
    quantized = glu(x, indices)
    cpu.to_float32([glu])
    assert isinstance(glu.up_proj, SwitchLinear) and glu.up_proj.weight.dtype == mx.float32
    assert not isinstance(glu.up_proj, KernelSwitchLinear)
    assert relative(glu(x, indices), quantized) < 2e-3
