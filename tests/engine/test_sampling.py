"""The batched sampler against mlx-lm's per-row filters: same distributions, own seeds."""

from collections import Counter

import mlx.core as mx
import pytest
from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p

from inference.engine import fastmath
from inference.engine.sampling import make_row_sampler, sample
from inference.engine.types import SamplingParams

# The engine never imports Django: the PostgreSQL pass would only repeat these.
pytestmark = pytest.mark.database_independent

VOCAB = 300
DRAWS = 20_000


def logits_for(sharpness: float, seed: int = 0) -> mx.array:
    return mx.random.normal((1, VOCAB), key=mx.random.key(seed)) * sharpness


def reference(logits: mx.array, p: SamplingParams) -> list[float]:
    """The distribution mlx-lm's own filters and categorical draw give."""
    lp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    if p.top_p < 1:
        lp = apply_top_p(lp, p.top_p)
    if p.min_p > 0:
        lp = apply_min_p(lp, p.min_p)
    if p.top_k > 0:
        lp = apply_top_k(lp, p.top_k)
    return mx.softmax(lp / p.temperature, axis=-1)[0].tolist()


def drawn(logits: mx.array, p: SamplingParams, rows: int = 500) -> Counter:
    samplers = [make_row_sampler(SamplingParams(**{**vars(p), "seed": s})) for s in range(rows)]
    batch = mx.repeat(logits, rows, axis=0)
    counts: Counter = Counter()
    for _ in range(DRAWS // rows):
        counts.update(sample(batch, samplers, want_logprobs=False)[0])
    return counts


@pytest.mark.parametrize(
    "params, sharpness",
    [
        (SamplingParams(temperature=0.7, top_p=0.9), 3.0),  # nucleus inside the candidates
        (SamplingParams(temperature=0.7, top_p=0.9), 0.3),  # nucleus past them: the fallback
        (SamplingParams(temperature=1.0, min_p=0.05), 3.0),
        (SamplingParams(temperature=1.3, top_k=5), 3.0),
        (SamplingParams(temperature=0.8, top_p=0.95, top_k=40, min_p=0.02), 2.0),
        (SamplingParams(temperature=0.7), 2.0),  # no filter: the whole vocabulary, unsorted
    ],
)
def test_same_distribution_as_mlx_lm_filters(params, sharpness, monkeypatch):
    monkeypatch.setattr("inference.engine.sampling.CANDIDATE_TIERS", (16, 64))
    logits = logits_for(sharpness)
    expected = reference(logits, params)
    counts = drawn(logits, params)
    assert all(expected[token] > 0 for token in counts), "drew a token the filters remove"
    total_variation = 0.5 * sum(abs(counts[t] / DRAWS - expected[t]) for t in range(VOCAB))
    support = sum(1 for q in expected if q > 0)
    # Sampling noise alone: about sqrt(support / DRAWS) / 2.
    assert total_variation < 0.6 * (support / DRAWS) ** 0.5 + 0.01


def test_a_seed_reproduces_whatever_runs_beside_it():
    seeded = SamplingParams(temperature=1.0, top_p=0.95, seed=7)
    logits = logits_for(1.5)

    def run(neighbours: int) -> list[int]:
        rows = [make_row_sampler(SamplingParams(temperature=0.9))] * neighbours
        rows = [*rows, make_row_sampler(seeded)]
        batch = mx.repeat(logits, len(rows), axis=0)
        return [sample(batch, rows, False)[0][-1] for _ in range(30)]

    assert run(0) == run(5) == run(12)


def test_greedy_rows_take_the_argmax_and_masked_tokens_are_never_drawn():
    logits = logits_for(2.0)
    masked = mx.where(mx.arange(VOCAB) % 2 == 0, -mx.inf, logits[0])[None, :]
    rows = [
        make_row_sampler(SamplingParams(temperature=0)),
        make_row_sampler(SamplingParams(temperature=5e-324)),
        make_row_sampler(SamplingParams(temperature=1.0, top_p=5e-324)),
        make_row_sampler(SamplingParams(temperature=2.0)),
        make_row_sampler(SamplingParams(temperature=2.0, top_p=0.99)),
        make_row_sampler(SamplingParams(temperature=2.0, top_k=VOCAB * 10)),
    ]
    batch = mx.repeat(masked, len(rows), axis=0)
    best = mx.argmax(masked).item()
    for _ in range(50):
        tokens, logprobs = sample(batch, rows, want_logprobs=True)
        assert tokens[:3] == [best] * 3
        assert all(t % 2 == 1 for t in tokens)
    assert logprobs is not None and abs(mx.logsumexp(logprobs[0]).item()) < 1e-4


def test_fast_exp_matches_exp_in_float32():
    x = mx.concatenate([mx.linspace(-100, 88, 10_001), mx.array([-mx.inf])])
    fast, exact = fastmath.exp(x), mx.exp(x)
    assert fast[-1].item() == 0.0
    relative = mx.abs(fast - exact) / mx.maximum(exact, 1e-30)
    assert mx.max(mx.where(x > -87, relative, 0)).item() < 2e-5
    assert mx.max(mx.where(x <= -87, fast, 0)).item() < 1e-37
