"""The sampling kernel (cpu_kernels.sample_rows, top_k_indices) against numpy and mlx-lm's
filters, and the engine's sampler with it against the sampler without it.

Distributions are compared exactly rather than statistically: a batch of rows with the same
logits draws with uniforms spread evenly over [0, 1), so each token is drawn by a share of the
rows equal to its probability, give or take a row or two at the interval ends.
"""

import random

# Imported outright: a machine where kernels/ did not build fails here rather than skipping.
import cpu_kernels as ck
import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p

from inference.engine import sampling
from inference.engine.cpu import kernel_status
from inference.engine.sampling import RowSampler, make_row_sampler, sample
from inference.engine.types import SamplingParams

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

GRID = 4000  # rows of one batch, one uniform each


def logits_of(vocab: int, sharpness: float, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(vocab) * sharpness).astype(np.float32)


def grid_uniforms(count: int = GRID) -> list[float]:
    return [(i + 0.5) / count for i in range(count)]


def mlx_lm_probabilities(logits: np.ndarray, p: SamplingParams) -> np.ndarray:
    """The distribution mlx-lm's own filters and categorical draw give."""
    x = mx.array(logits)[None, :]
    lp = x - mx.logsumexp(x, axis=-1, keepdims=True)
    if p.top_p < 1:
        lp = apply_top_p(lp, p.top_p)
    if p.min_p > 0:
        lp = apply_min_p(lp, p.min_p)
    if p.top_k > 0:
        lp = apply_top_k(lp, p.top_k)
    return np.array(mx.softmax(lp / p.temperature, axis=-1)[0], dtype=np.float64)


def kernel_counts(logits: np.ndarray, p: SamplingParams) -> np.ndarray:
    row = [1 / p.temperature, p.top_p, p.min_p, float(p.top_k)]
    params = mx.array([[*row, u] for u in grid_uniforms()], dtype=mx.float32)
    batch = mx.array(np.repeat(logits[None, :], GRID, axis=0))
    tokens = np.array(ck.sample_rows(batch, params))
    return np.bincount(tokens, minlength=logits.shape[0])


FILTERS = [
    (SamplingParams(temperature=0.7, top_p=0.9), 3.0),
    (SamplingParams(temperature=0.7, top_p=0.9), 0.3),  # a flat row: the nucleus is wide
    (SamplingParams(temperature=1.0, min_p=0.05), 3.0),
    (SamplingParams(temperature=1.0, min_p=0.05), 0.3),
    (SamplingParams(temperature=1.3, top_k=5), 3.0),
    (SamplingParams(temperature=1.3, top_k=700), 0.3),
    (SamplingParams(temperature=0.8, top_p=0.95, top_k=40, min_p=0.02), 2.0),
    (SamplingParams(temperature=0.5, top_p=0.5, min_p=0.2), 1.0),
    (SamplingParams(temperature=0.7), 2.0),  # no filter: the whole vocabulary
]


@pytest.mark.parametrize("params, sharpness", FILTERS)
def test_kernel_draws_mlx_lm_distribution(params, sharpness):
    logits = logits_of(3000, sharpness, seed=int(sharpness * 10))
    expected = mlx_lm_probabilities(logits, params)
    counts = kernel_counts(logits, params)
    assert counts[expected == 0].sum() == 0, "drew a token the filters remove"
    # Each token's share of an evenly spread grid is its probability within a row or two.
    assert np.abs(counts - expected * GRID).max() <= 2.5


def misjudged_row() -> np.ndarray:
    """A row whose reach the kernel's histogram (bins of 0.25 nats, each token taken at its
    bin's middle) guesses short: 400 tokens at the far edge of the bin 4.49 nats below the
    most likely hold less than the histogram thinks, and top_p 0.9 reaches past them to the
    20,000 tokens 10 nats below. All values distinct (no ties for the filters to break)."""
    near = -4.49 - 1e-5 * np.arange(400)
    far = -10.0 - 1e-5 * np.arange(20_000)
    return np.concatenate([[0.0], near, far]).astype(np.float32)


@pytest.mark.parametrize(
    "logits, params",
    [
        (misjudged_row(), SamplingParams(temperature=1.0, top_p=0.9)),
        (logits_of(49152, 3.0), SamplingParams(temperature=0.7, top_p=0.95)),  # wide nucleus
        (logits_of(49152, 3.0), SamplingParams(temperature=0.7, top_k=3000)),
    ],
)
def test_kernel_reaches_far_rows_exactly(logits, params):
    expected = mlx_lm_probabilities(logits, params)
    counts = kernel_counts(logits, params)
    assert counts[expected == 0].sum() == 0, "drew a token the filters remove"
    assert np.abs(counts - expected * GRID).max() <= 2.5


def numpy_top_k(x: np.ndarray, k: int) -> np.ndarray:
    """A stable sort, largest first: equal values by lower index, -inf after the rest."""
    return np.argsort(-x, axis=-1, kind="stable")[:, :k]


@pytest.mark.parametrize("vocab, k", [(1, 1), (10, 10), (1000, 1), (1000, 37), (49152, 1024)])
def test_top_k_indices_match_a_stable_sort_with_ties_and_minus_inf(vocab, k):
    rng = np.random.default_rng(vocab + k)
    rows = [
        rng.standard_normal(vocab) * 3,
        np.round(rng.standard_normal(vocab) * 2),  # many ties
        np.where(rng.random(vocab) < 0.5, -np.inf, rng.standard_normal(vocab)),
        np.full(vocab, -np.inf),
        np.where(np.arange(vocab) < vocab - 3, -np.inf, 1.0),  # fewer finite values than k
        np.full(vocab, 40.0),  # one value: the first k indices
    ]
    x = np.stack(rows).astype(np.float32)
    ours = np.array(ck.top_k_indices(mx.array(x), k))
    assert ours.dtype == np.int32 and ours.shape == (len(rows), k)
    np.testing.assert_array_equal(ours, numpy_top_k(x, k))
    values = np.take_along_axis(x, ours.astype(np.int64), axis=-1)
    np.testing.assert_array_equal(values, -np.sort(-x, axis=-1, kind="stable")[:, :k])


def test_greedy_rows_masks_and_rounded_uniforms():
    x = logits_of(500, 2.0)
    x[::2] = -np.inf
    x[7] = x[9] = x.max() + 1  # tied best: the first, as mx.argmax
    batch = mx.array(np.repeat(x[None, :], 6, axis=0))
    params = mx.array(
        [
            [0.0, 1.0, 0.0, 0.0, 0.5],  # greedy
            [1.0, 0.9, 0.0, 0.0, 1.0],  # a uniform float32 rounded up to 1
            [1.0, 1.0, 0.0, 0.0, 1.0],  # the same without filters
            [1e30, 0.9, 0.0, 0.0, 0.7],  # a tiny temperature: the two best only
            [1.0, 1.0, 1.0, 0.0, 0.9],  # min_p 1: the best tokens only
            [1.0, 1.0, 0.0, 1.0, 0.9],  # top_k 1
        ],
        dtype=mx.float32,
    )
    tokens = ck.sample_rows(batch, params).tolist()
    assert tokens[0] == 7
    assert all(t % 2 == 1 for t in tokens), "drew a masked token"
    assert tokens[3] in (7, 9) and tokens[4] in (7, 9) and tokens[5] == 7
    everything_masked = mx.full((2, 300), -mx.inf)
    assert ck.sample_rows(everything_masked, mx.ones((2, 5))).tolist() == [0, 0]


@pytest.fixture
def kernel_on():
    assert kernel_status().available, kernel_status().reason
    assert sampling.USE_KERNEL
    yield
    sampling.USE_KERNEL = True


class Evenly(random.Random):
    """A row's uniforms taken from a list, so that a batch covers [0, 1) evenly."""

    def __init__(self, values: list[float]) -> None:
        super().__init__(0)
        self.values = list(values)

    def random(self) -> float:
        return self.values.pop(0)


def sampler_tokens(logits: np.ndarray, p: SamplingParams, kernel: bool) -> list[int]:
    sampling.USE_KERNEL = kernel
    template = make_row_sampler(p)
    rows = [
        RowSampler(
            greedy=False,
            inverse_temperature=template.inverse_temperature,
            top_p=template.top_p,
            min_p=template.min_p,
            top_k=template.top_k,
            rng=Evenly([u]),
        )
        for u in grid_uniforms()
    ]
    batch = mx.array(np.repeat(logits[None, :], GRID, axis=0))
    return sample(batch, rows, want_logprobs=False)[0]


@pytest.mark.parametrize("params, sharpness", FILTERS)
def test_engine_sampler_same_with_and_without_the_kernel(kernel_on, params, sharpness):
    logits = logits_of(2000, sharpness, seed=3)
    with_kernel = sampler_tokens(logits, params, kernel=True)
    without = sampler_tokens(logits, params, kernel=False)
    a, b = np.bincount(with_kernel, minlength=2000), np.bincount(without, minlength=2000)
    assert np.abs(a - b).max() <= 3
    # The same uniform picks the same token but where rounding moves an interval's end.
    assert sum(x != y for x, y in zip(with_kernel, without, strict=True)) <= 0.01 * GRID


def test_a_seed_reproduces_whatever_runs_beside_it_in_the_kernel(kernel_on):
    seeded = SamplingParams(temperature=1.0, top_p=0.95, seed=7)
    logits = mx.array(logits_of(49152, 1.5))[None, :]

    def run(neighbours: int) -> list[int]:
        rows = [make_row_sampler(SamplingParams(temperature=0.9)) for _ in range(neighbours)]
        rows = [*rows, make_row_sampler(seeded)]
        batch = mx.repeat(logits, len(rows), axis=0)
        return [sample(batch, rows, False)[0][-1] for _ in range(30)]

    first = run(0)
    assert first == run(5) == run(12)
    assert len(set(first)) > 1  # it does draw


def test_the_engine_uses_the_kernel_and_keeps_logprobs(kernel_on):
    x = logits_of(1000, 2.0)
    params = SamplingParams(temperature=0.8, top_p=0.9)
    logits = mx.array(x)[None, :]
    assert sampling._kernel_usable(logits)
    nucleus = mlx_lm_probabilities(x, params) > 0
    for _ in range(20):
        tokens, logprobs = sample(logits, [make_row_sampler(params)], want_logprobs=True)
        assert nucleus[tokens[0]]
    assert logprobs is not None and abs(mx.logsumexp(logprobs[0]).item()) < 1e-4
