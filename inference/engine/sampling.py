"""Sampling for a whole decode batch at once, and per-request logits processors.

One call per step covers every row: greedy rows take the argmax; the others keep their
filters (top_p, min_p, top_k, in mlx-lm's order and meaning) and draw from a small candidate
set found with argpartition instead of sorting the whole vocabulary. A row whose filters reach
past the candidates (a flat distribution, or no filter at all) is drawn from the full
vocabulary, so every row samples from exactly the distribution mlx-lm's per-row filters give.
Each request draws its uniforms from its own generator: a seed reproduces its output whatever
runs beside it.

On a CPU with the cpu_kernels extension in use, the whole batch is drawn in one primitive
(`sample_rows`, kernels/src/sampling.cpp) with the same filters, order and uniforms: MLX's
argpartition over the vocabulary cost about 2 ms a row there.
"""

from __future__ import annotations

import math
import random
import secrets
from dataclasses import dataclass, field

import mlx.core as mx
from mlx_lm.sample_utils import make_logits_processors

from inference.engine import fastmath
from inference.engine.cpu.ext import ext
from inference.engine.cpu.status import in_use
from inference.engine.types import SamplingParams

# OpenAI's penalties look at the whole answer; mlx-lm's default window is 20 tokens.
PENALTY_WINDOW = 1024
# A top_p this small keeps only the most likely token (its probability is at least
# 1/vocabulary), and in float32 the filter cannot tell it from 0 (1 - top_p rounds to 1)
# and would mask every token: sampling would then be uniform over the vocabulary.
GREEDY_TOP_P = 1e-6
# Below this, 1/temperature pushes logits out of float32's range (inf, then NaN).
GREEDY_TEMPERATURE = 1e-30
# Candidates per row, tried in turn: a trained model's top_p 0.9 nucleus almost always fits in
# the first tier; rows whose filters reach past it try the next, then the sorted vocabulary.
# (Finding 1,024 candidates costs as much as 256; sorting the whole vocabulary is 10x both.)
CANDIDATE_TIERS = (1024, 8192)
# Whether rows are drawn in the kernel where it is in use (off: MLX's path, for A/B runs).
USE_KERNEL = True
# A greedy row's parameters as the kernel takes them (inverse temperature 0: the argmax).
_GREEDY_ROW = [0.0, 1.0, 0.0, 0.0, 0.0]


@dataclass
class RowSampler:
    """One sequence's sampling settings and its own random stream."""

    greedy: bool
    inverse_temperature: float = 1.0
    top_p: float = 1.0
    min_p: float = 0.0
    top_k: int = 0
    rng: random.Random | None = None
    # Uniforms drawn ahead for a speculative step's positions and not yet used.
    ahead: list[float] = field(default_factory=list)

    @property
    def filtered(self) -> bool:
        return self.top_p < 1 or self.min_p > 0 or self.top_k > 0

    def uniform(self) -> float:
        if self.ahead:
            return self.ahead.pop(0)
        assert self.rng is not None
        return self.rng.random()

    def peek(self, n: int) -> list[float]:
        """The next `n` uniforms, left in place: a speculative step draws one per position
        but uses only those of the tokens it keeps (consume), so a seed gives the same
        tokens with or without speculation."""
        assert self.rng is not None
        while len(self.ahead) < n:
            self.ahead.append(self.rng.random())
        return self.ahead[:n]

    def consume(self, n: int) -> None:
        del self.ahead[:n]


def make_row_sampler(params: SamplingParams) -> RowSampler:
    if params.temperature < GREEDY_TEMPERATURE or params.top_p < GREEDY_TOP_P:
        return RowSampler(greedy=True)
    if not 0 <= params.min_p <= 1:
        raise ValueError(f"min_p must be in [0, 1], not {params.min_p}")
    if params.top_k < 0:
        raise ValueError(f"top_k must not be negative, not {params.top_k}")
    seed = params.seed if params.seed is not None else secrets.randbits(63)
    return RowSampler(
        greedy=False,
        inverse_temperature=1 / params.temperature,
        top_p=min(params.top_p, 1.0),
        min_p=params.min_p,
        top_k=params.top_k,
        rng=random.Random(seed),
    )


def column(values: list[float], dtype=mx.float32) -> mx.array:
    return mx.array(values, dtype=dtype)[:, None]


def sample(
    logits: mx.array,
    rows: list[RowSampler],
    want_logprobs: bool,
    given: list[float | None] | None = None,
) -> tuple[list[int], mx.array | None]:
    """Next token of every row of `logits` (batch, vocabulary), and the rows' log
    probabilities when some row samples or asked for them (None otherwise). `given`: each
    sampling row's uniform, drawn by the caller (else each row's sampler draws its own)."""
    drawing = [i for i, r in enumerate(rows) if not r.greedy]
    if not drawing and not want_logprobs:
        return mx.argmax(logits, axis=-1).tolist(), None
    logprobs = logits - fastmath.logsumexp(logits)
    uniforms = {i: rows[i].uniform() if given is None else given[i] for i in drawing}
    if drawing and _kernel_usable(logits):
        return _from_kernel(logits, rows, uniforms).tolist(), logprobs
    greedy = mx.argmax(logits, axis=-1)
    filtered = [i for i in drawing if rows[i].filtered]
    plain = [i for i in drawing if not rows[i].filtered]
    picked: list[tuple[list[int], mx.array]] = [(list(range(len(rows))), greedy)]
    if plain:
        picked.append((plain, _from_vocabulary(*_subset(logprobs, rows, uniforms, plain))))
    pending = filtered
    for tier in (*CANDIDATE_TIERS, None):
        if not pending:
            break
        tokens, exact = _from_candidates(*_subset(logprobs, rows, uniforms, pending), tier)
        mx.eval(tokens, exact, *(t for _, t in picked))
        flags = exact.tolist()
        if any(flags):
            where = mx.array([k for k, ok in enumerate(flags) if ok])
            picked.append(([i for i, ok in zip(pending, flags, strict=True) if ok], tokens[where]))
        pending = [i for i, ok in zip(pending, flags, strict=True) if not ok]
    mx.eval(*(t for _, t in picked))
    out = [0] * len(rows)
    for indices, tokens in picked:
        for i, token in zip(indices, tokens.tolist(), strict=True):
            out[i] = token
    return out, logprobs


def samples_unseen(rows: list[RowSampler]) -> bool:
    """Whether `sample_unseen` can draw these rows: greedy ones, or any with the kernel."""
    return all(r.greedy for r in rows) or _kernel_in_use()


def sample_unseen(logits: mx.array, rows: list[RowSampler]) -> mx.array:
    """The rows' next tokens as an array not yet computed (a step queued ahead feeds them on
    without the host reading them first). Only where `samples_unseen(rows)`: the candidate
    tiers of MLX's path look at the values on the way. No log probabilities."""
    drawing = [i for i, r in enumerate(rows) if not r.greedy]
    if not drawing:
        return mx.argmax(logits, axis=-1)
    return _from_kernel(logits, rows, {i: rows[i].uniform() for i in drawing})


def _kernel_in_use() -> bool:
    # An extension built before sample_rows existed lacks it: MLX's path then.
    return USE_KERNEL and in_use() and hasattr(ext, "sample_rows")


def _kernel_usable(logits: mx.array) -> bool:
    return logits.ndim == 2 and _kernel_in_use()


def _from_kernel(logits: mx.array, rows: list[RowSampler], uniforms: dict[int, float]) -> mx.array:
    """Every row in one primitive: greedy rows take the argmax, the others their filters and
    their uniform (the kernel keeps mlx-lm's filters without sorting the vocabulary)."""
    params = [
        [r.inverse_temperature, r.top_p, r.min_p, float(r.top_k), uniforms[i]]
        if i in uniforms
        else _GREEDY_ROW
        for i, r in enumerate(rows)
    ]
    return ext.sample_rows(logits, mx.array(params, dtype=mx.float32))


def _subset(logprobs: mx.array, rows: list[RowSampler], uniforms: dict, indices: list[int]):
    return logprobs[mx.array(indices)], [rows[i] for i in indices], [uniforms[i] for i in indices]


def _draw(weights: mx.array, uniforms: list[float]) -> mx.array:
    """Index of each row's draw from unnormalized `weights` by inverting its running sum."""
    running = mx.cumsum(weights, axis=-1)
    target = column(uniforms) * running[:, -1:]
    index = mx.minimum(mx.sum(running <= target, axis=-1), weights.shape[-1] - 1)
    # Rounding can land a draw of u close to 1 past the last allowed token.
    allowed = mx.take_along_axis(weights, index[:, None], axis=-1)[:, 0] > 0
    return mx.where(allowed, index, mx.argmax(weights, axis=-1))


def _keep(sorted_lp: mx.array, rows: list[RowSampler]) -> mx.array:
    """Which of each row's tokens (sorted most likely first) survive top_p, min_p, top_k:
    mlx-lm's filters, each of which keeps a prefix of the sorted tokens."""
    probs = fastmath.exp(sorted_lp)
    mass_before = mx.cumsum(probs, axis=-1) - probs
    keep = mass_before < column([r.top_p if r.top_p < 1 else math.inf for r in rows])
    min_p = column([math.log(r.min_p) if r.min_p > 0 else -math.inf for r in rows])
    keep = keep & (sorted_lp >= sorted_lp[:, :1] + min_p)
    top_k = column([r.top_k or sorted_lp.shape[-1] for r in rows], mx.int32)
    keep = keep & (mx.arange(sorted_lp.shape[-1])[None, :] < top_k)
    return keep & (sorted_lp > -math.inf)


def _weights(logprobs: mx.array, keep: mx.array | None, rows: list[RowSampler]) -> mx.array:
    top = mx.max(logprobs, axis=-1, keepdims=True)
    scaled = (logprobs - top) * column([r.inverse_temperature for r in rows])
    weights = fastmath.exp(scaled)
    return weights if keep is None else mx.where(keep, weights, 0.0)


def _from_candidates(
    logprobs: mx.array, rows: list[RowSampler], uniforms: list[float], k: int | None
) -> tuple[mx.array, mx.array]:
    """Draws from each row's `k` most likely tokens (all of them, sorted, when k is None);
    also says for which rows that draw is exact: where some filter cut inside the candidates
    (what lies beyond them ranks lower and would be cut too)."""
    vocab = logprobs.shape[-1]
    k = vocab if k is None else min(k, vocab)
    if k < vocab:
        ids = mx.argpartition(-logprobs, k - 1, axis=-1)[:, :k]
        values = mx.take_along_axis(logprobs, ids, axis=-1)
    else:
        ids, values = None, logprobs
    order = mx.argsort(-values, axis=-1)
    sorted_lp = mx.take_along_axis(values, order, axis=-1)
    sorted_ids = order if ids is None else mx.take_along_axis(ids, order, axis=-1)
    keep = _keep(sorted_lp, rows)
    index = _draw(_weights(sorted_lp, keep, rows), uniforms)
    token = mx.take_along_axis(sorted_ids, index[:, None], axis=-1)[:, 0]
    return token, (mx.sum(keep, axis=-1) < k) | (k == vocab)


def _from_vocabulary(logprobs: mx.array, rows: list[RowSampler], uniforms: list[float]) -> mx.array:
    """Rows without filters draw from the whole vocabulary as it is, no sort needed."""
    allowed = logprobs > -math.inf
    return _draw(_weights(logprobs, allowed, rows), uniforms)


def probe(params: SamplingParams, vocab_size: int) -> None:
    """Runs fresh copies of the request's sampler and processors once on dummy logits: a
    parameter they cannot take fails this request alone, not the decode step it would share
    with others."""
    logits = mx.zeros((1, vocab_size))
    tokens = mx.array([0], dtype=mx.uint32)
    for process in make_processors(params):
        logits = process(tokens, logits)
    sample(logits, [make_row_sampler(params)], want_logprobs=False)


class LogitBias:
    """logit_bias as a processor that looks at no tokens: a pipelined step (decode.py) adds it
    to logits the host has not read, where penalties and grammars need the tokens first."""

    history_free = True

    def __init__(self, bias: dict[int, float]) -> None:
        self._indices = mx.array(list(bias.keys()))
        self._values = mx.array(list(bias.values()))

    def __call__(self, _tokens: mx.array | None, logits: mx.array) -> mx.array:
        return logits.at[:, self._indices].add(self._values)


def needs_history(processors: list) -> bool:
    """Whether some processor reads the tokens seen so far (penalties, grammars)."""
    return not all(getattr(p, "history_free", False) for p in processors)


def make_processors(params: SamplingParams) -> list:
    bias = [LogitBias(params.logit_bias)] if params.logit_bias else []
    return bias + make_logits_processors(
        repetition_penalty=params.repetition_penalty if params.repetition_penalty != 1 else None,
        repetition_context_size=PENALTY_WINDOW,
        presence_penalty=params.presence_penalty or None,
        presence_context_size=PENALTY_WINDOW,
        frequency_penalty=params.frequency_penalty or None,
        frequency_context_size=PENALTY_WINDOW,
    )
