"""The quantized matmul's integer paths (kernels/src/int8*: activations rounded per block to
two int8 bytes, integer dot products; tiles of unpacked weights for many rows, weights read as
packed for few) against MLX: exact for the rounded activations, close to the float product,
and on the demo model the same next-token predictions as the float path."""

from __future__ import annotations

from pathlib import Path

# Imported outright: a machine where kernels/ did not build fails here rather than skipping.
import cpu_kernels as ck
import mlx.core as mx
import pytest
from mlx_lm import load
from mlx_lm.models.cache import make_prompt_cache

from inference.engine import cpu

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

ISAS = [isa for isa in ("avx512", "avx2", "generic") if ck.use_isa(isa)]
ck.use_isa(ISAS[0])
# Instruction sets with an integer path here (generic has none: it always computes in float).
INT8_ISAS = [isa for isa in ISAS if ck.use_isa(isa) and ck.int8_isa() != "none"]
ck.use_isa(ISAS[0])
# (instruction set, mode) pairs with an integer path: the tiles everywhere there is one, the
# direct path too (AVX-512 VNNI or AVX2: direct_isa names it).
INT8_PATHS = [(isa, "always") for isa in INT8_ISAS]
DIRECT = [isa for isa in INT8_ISAS if ck.use_isa(isa) and ck.direct_isa() != "none"]
INT8_PATHS += [(isa, "direct") for isa in DIRECT]
ck.use_isa(ISAS[0])

ROWS = (1, 2, 3, 5, 7, 16, 17, 33, 64, 100, 129, 255, 300)
DTYPES = (mx.float16, mx.bfloat16, mx.float32)


@pytest.fixture(params=INT8_PATHS, ids=["-".join(p) for p in INT8_PATHS])
def int8_isa(request):
    """One integer path forced on for every row count, under one instruction set."""
    isa, mode = request.param
    assert ck.use_isa(isa)
    ck.use_int8(mode)
    yield request.param
    ck.use_int8("auto")
    ck.use_isa(ISAS[0])


def quantized(n: int, k: int, bits: int, group: int, dtype: mx.Dtype, seed: int):
    key = mx.random.key(seed)
    w, s, b = mx.quantize(mx.random.normal((n, k), key=key), group, bits)
    return w, s.astype(dtype), b.astype(dtype)


def rounded(x: mx.array, group: int) -> mx.array:
    """x as the integer path sees it: per block of `group`, t = x * 127 / max|x|, two int8
    values hi = round(t) and lo = round((t - hi) * 128) (ties to even), and x = (128 hi + lo)
    * max|x| / 127 / 128, in float32 as the kernel computes them."""
    blocks = x.reshape(*x.shape[:-1], -1, group)
    amax = mx.abs(blocks).max(axis=-1, keepdims=True)
    t = blocks * mx.where(amax > 0, mx.array(127.0) / amax, mx.array(0.0))
    hi = mx.round(t)
    lo = mx.round((t - hi) * 128.0)
    return ((hi * 128.0 + lo) * (amax / 127.0 / 128.0)).reshape(x.shape)


def relative(ours: mx.array, theirs: mx.array) -> float:
    """Largest difference next to the largest value of the reference."""
    return mx.abs(ours - theirs).max().item() / (mx.abs(theirs).max().item() + 1e-12)


def cases():
    # k in groups of 1, 3, 5 or 12 (3: a kernel's tail of 8 packed dwords), n odd and small.
    shapes = [(1, 17), (3, 100), (5, 257), (12, 3), (3, 1), (5, 64)]
    for i, m in enumerate(ROWS):
        for bits in (4, 8):
            for group in (32, 64, 128):
                groups, n = shapes[(i + bits + group // 32) % len(shapes)]
                yield m, group * groups, n, bits, group


@pytest.mark.parametrize("m,k,n,bits,group", list(cases()))
def test_int8_path_matches_mlx(int8_isa, m, k, n, bits, group):
    x = mx.random.normal((m, k), key=mx.random.key(m + k)) * 2
    for dtype in DTYPES:
        w, s, b = quantized(n, k, bits, group, dtype, seed=m * n + k + bits)
        ours = ck.quantized_matmul(x, w, s, b, group, bits)
        mx.eval(ours)  # under this fixture's mode: evaluation is lazy
        assert ours.dtype == mx.float32 and ours.shape == (m, n)
        # Exact for the activations it rounds, up to float32 summation order ...
        exact = mx.quantized_matmul(rounded(x, group), w, s, b, group_size=group, bits=bits)
        assert relative(ours, exact) < 5e-5, (int8_isa, dtype)
        # ... and within their rounding (to 15 bits of each block's largest) of the float product.
        theirs = mx.quantized_matmul(x, w, s, b, group_size=group, bits=bits)
        assert relative(ours, theirs) < 1e-3, (int8_isa, dtype)


def test_int8_path_splits_over_threads_without_changing_a_bit(int8_isa):
    w, s, b = quantized(1000, 576, 4, 32, mx.float16, seed=5)
    x = mx.random.normal((70, 576))
    try:
        ck.set_threads(1)
        alone = ck.quantized_matmul(x, w, s, b, 32, 4)
        mx.eval(alone)
        ck.set_threads(2)
        together = ck.quantized_matmul(x, w, s, b, 32, 4)
        mx.eval(together)
        assert mx.array_equal(alone, together).item()
    finally:
        ck.set_threads(0)


def evaluated(mode: str, make) -> mx.array:
    ck.use_int8(mode)
    try:
        out = make()
        mx.eval(out)
        return out
    finally:
        ck.use_int8("auto")


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("k", [576, 2048])
def test_auto_takes_few_rows_direct_and_many_in_tiles_or_panels(isa, k):
    """Few rows direct (on AVX2 from 1,024 input features: shorter rows run faster as floats),
    many in the integer tiles, or in float panels where those are faster (AVX2 without
    VNNI: tests/engine/test_panels_matmul.py)."""
    assert ck.use_isa(isa)
    try:
        w, s, b = quantized(300, k, 4, 32, mx.float16, seed=7)
        for m in (1, 4, 8, 12, 300):
            x = mx.random.normal((m, k), key=mx.random.key(m))
            paths = {
                mode: evaluated(mode, lambda x=x: ck.quantized_matmul(x, w, s, b, 32, 4))
                for mode in ("auto", "never", "always", "direct", "panels")
            }
            vnni = ck.direct_isa() == "avx512vnni"
            direct = isa in DIRECT and (k >= 1024 or vnni) and m <= (8 if vnni else 15)
            if ck.int8_isa() == "none":
                expected = "never"
            elif m <= 4 or direct:  # decode steps: direct where it is taken, else floats
                expected = "direct" if direct else "never"
            elif m < 16 and not vnni:  # AVX2's short rows: floats up to the panels' 16
                expected = "never"
            else:
                expected = "panels" if ck.panels_isa() != "none" else "always"
            assert mx.array_equal(paths["auto"], paths[expected]).item(), (isa, m)
            if expected != "never":  # the paths differ, so the comparison above tells
                assert not mx.array_equal(paths[expected], paths["never"]).item()
    finally:
        ck.use_isa(ISAS[0])


@pytest.mark.skipif(not DIRECT, reason="no direct integer path on this CPU")
@pytest.mark.parametrize("bits", [4, 8])
def test_direct_path_computes_a_row_alike_in_any_batch(bits):
    """What speculative verification relies on (engine/speculative.plain_numerics): a row's
    result does not depend on how many rows, or which columns, share its product."""
    w, s, b = quantized(203, 1536, bits, 32, mx.float16, seed=11)
    x = mx.random.normal((9, 1536), key=mx.random.key(3))
    ck.use_isa(DIRECT[0])
    alone = [
        evaluated("direct", lambda i=i: ck.quantized_matmul(x[i : i + 1], w, s, b, 32, bits))
        for i in range(9)
    ]
    for m in (2, 3, 4, 5, 9):
        together = evaluated("direct", lambda m=m: ck.quantized_matmul(x[:m], w, s, b, 32, bits))
        for i in range(m):
            assert mx.array_equal(together[i : i + 1], alone[i]).item(), (m, i)
    # Columns computed four at a time or one at a time (the last of 203) sum alike.
    narrow = evaluated(
        "direct", lambda: ck.quantized_matmul(x[:1], w[200:], s[200:], b[200:], 32, bits)
    )
    assert mx.array_equal(narrow, alone[0][:, 200:]).item()


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("bits", [4, 8])
def test_every_path_computes_a_row_alike_in_any_batch(isa, bits):
    """Floats, tiles and direct (where there is one): a row's result is the same in 6 rows or 40."""
    assert ck.use_isa(isa)
    try:
        w, s, b = quantized(96, 576, bits, 32, mx.float16, seed=5)
        x = mx.random.normal((40, 576), key=mx.random.key(5))
        for mode in ("never", "always", *(["direct"] if isa in DIRECT else [])):
            few = evaluated(mode, lambda: ck.quantized_matmul(x[:6], w, s, b, 32, bits))
            for m in (7, 13, 40):
                many = evaluated(mode, lambda m=m: ck.quantized_matmul(x[:m], w, s, b, 32, bits))
                assert mx.array_equal(many[:6], few).item(), (mode, m)
    finally:
        ck.use_isa(ISAS[0])


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("bits", [4, 8])
def test_use_int8_rows_computes_wide_products_as_their_plain_step(isa, bits):
    """What speculative verification relies on (engine/speculative.plain_numerics): n rows fed
    with their drafts (n times the width) compute each row as the n rows alone do, whichever
    path auto takes for n (direct, float or tiles)."""
    assert ck.use_isa(isa)
    try:
        w, s, b = quantized(96, 576, bits, 32, mx.float16, seed=9)
        for rows in (1, 2, 4, 5, 6, 7, 8, 12, 16):
            x = mx.random.normal((rows * 5, 576), key=mx.random.key(rows))
            plain = evaluated(
                "auto", lambda x=x, r=rows: ck.quantized_matmul(x[:r], w, s, b, 32, bits)
            )
            ck.use_int8_rows(rows)
            try:
                wide = evaluated("auto", lambda x=x: ck.quantized_matmul(x, w, s, b, 32, bits))
            finally:
                ck.use_int8_rows(0)
            assert mx.array_equal(wide[:rows], plain).item(), rows
    finally:
        ck.use_isa(ISAS[0])


def test_use_int8_refuses_other_modes():
    with pytest.raises(ValueError, match="auto, always, direct, panels or never"):
        ck.use_int8("sometimes")


# A fixed text of about 500 tokens for the demo model to read.
TEXT = """The lighthouse on the northern cape was built in the spring of 1871, after three ships
were lost on the same reef in a single winter. The keeper, a former fisherman named Elias
Brandt, kept a log of every night he spent in the tower: the weather, the ships he saw, the oil
he burned, and the small repairs that a building of stone and iron needs when the sea throws
itself against it for months at a time. His log survives in the town library, and it is one of
the best records we have of how a lighthouse was actually run.

Brandt lit the lamp half an hour before sunset and put it out half an hour after sunrise. In
between, he climbed the one hundred and twelve steps every four hours to trim the wicks, clean
the soot from the glass, and wind the clockwork that turned the lens. On foggy nights he also
sounded a horn, twice every minute, until the fog lifted or his arms gave out. His wife, Anna,
took the watch when he slept, and their two children learned to read from the pages of the
almanac that listed the times of the tides.

The work was lonely, but it was not quiet. Storms broke windows and tore slates from the roof.
Birds, drawn by the light, struck the glass by the hundreds during the autumn migration, and the
family would find them on the gallery in the morning. Supplies came by boat once a month when
the weather allowed, and in hard winters the boat did not come at all. Brandt noted in his log
that in January of 1880 they lived for five weeks on salted fish, potatoes, and tea.

Over the years the technology changed around him. Paraffin replaced whale oil, and later a
pressure lamp gave a light four times brighter than the old wicks. A telegraph line reached the
cape in 1894, which meant that Brandt could report a wreck to the harbour master within minutes
instead of sending his son running along the cliffs. When he retired in 1902, the lighthouse
was one of the most reliable on the coast, and the reef had not claimed a ship in twenty years.

Today the light is automatic. A small electric lamp, controlled by a sensor that measures the
daylight, does the work that once took a family. Visitors can climb the steps, look at the great
lens, and read the keeper's careful handwriting in the glass case at the bottom of the tower.
"""


@pytest.fixture(scope="module")
def demo(smollm_dir: Path):
    model, tokenizer = load(str(smollm_dir))
    assert cpu.kernel_status().available, cpu.kernel_status().reason
    cpu.accelerate(model)
    return model, tokenizer


@pytest.mark.skipif(not INT8_ISAS, reason="no integer path on this CPU")
def test_demo_model_reads_a_prompt_with_the_same_predictions(demo):
    model, tokenizer = demo
    tokens = mx.array(tokenizer.encode(TEXT))[None]
    assert 450 <= tokens.shape[1] <= 600
    ints = evaluated("auto", lambda: model(tokens)[0].argmax(axis=-1))
    floats = evaluated("never", lambda: model(tokens)[0].argmax(axis=-1))
    agreement = (ints == floats).mean().item()
    assert agreement >= 0.99, agreement


def greedy(model, prompt: list[int], steps: int, mode: str) -> tuple[list[int], mx.array]:
    """Greedy tokens, every position fed alone (one row per product, as a decode step)."""
    ck.use_int8(mode)
    try:
        cache = make_prompt_cache(model)
        tokens, logits = [], None
        for token in prompt + [None] * steps:
            if token is None:
                token = tokens[-1]
            logits = model(mx.array([[token]]), cache=cache)[0, -1]
            tokens.append(logits.argmax().item())
        return tokens[len(prompt) - 1 :], logits
    finally:
        ck.use_int8("auto")


def test_greedy_decode_keeps_the_float_paths_tokens(demo):
    """One row per product (a decode step) takes the direct integer path where there is VNNI:
    the same greedy tokens as the float path, logits within the activations' rounding."""
    model, tokenizer = demo
    prompt = tokenizer.encode("The keeper of the lighthouse wrote in his log that")
    auto_tokens, auto_logits = greedy(model, prompt, 24, "auto")
    float_tokens, float_logits = greedy(model, prompt, 24, "never")
    assert auto_tokens == float_tokens
    assert relative(auto_logits, float_logits) < 2e-3


def test_the_status_names_the_integer_paths_in_use():
    """What /health and the dashboard show (engine state's `kernels`): the matmul's integer
    path for decode and for prompts under the instruction set in use."""
    status = cpu.kernel_status()
    assert status.available, status.reason
    prompts = f"int8 {ck.int8_isa()}" if ck.int8_isa() != "none" else "float"
    if ck.panels_isa() != "none":  # AVX2 without VNNI: its integer tiles are slower
        prompts = f"float panels {ck.panels_isa()}"
    assert (status.direct, status.prompts) == (ck.direct_isa(), prompts)
    assert f"int8 decode {ck.direct_isa()}, prompts {prompts}" in status.describe()
    if ck.int8_isa() != "none":  # every CPU with an integer path has a direct one too
        assert ck.direct_isa() != "none"
