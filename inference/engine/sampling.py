"""Per-request samplers and logits processors, built on mlx-lm's pieces."""

from __future__ import annotations

import secrets
from collections.abc import Callable

import mlx.core as mx
from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p, make_logits_processors

from inference.engine.types import SamplingParams

Sampler = Callable[[mx.array], mx.array]
# OpenAI's penalties look at the whole answer; mlx-lm's default window is 20 tokens.
PENALTY_WINDOW = 1024
# A top_p this small keeps only the most likely token (its probability is at least
# 1/vocabulary), and in float32 mlx-lm's filter cannot tell it from 0 (1 - top_p rounds to 1)
# and masks every token: sampling would then be uniform over the vocabulary.
GREEDY_TOP_P = 1e-6
# Below this, 1/temperature pushes logits out of float32's range (inf, then NaN).
GREEDY_TEMPERATURE = 1e-30


def greedy(logprobs: mx.array) -> mx.array:
    return mx.argmax(logprobs, axis=-1)


def make_sampler(params: SamplingParams) -> Sampler:
    """Each request owns its random key, so a seed reproduces its output whatever runs beside it."""
    if params.temperature < GREEDY_TEMPERATURE or params.top_p < GREEDY_TOP_P:
        return greedy
    filters: list[Callable[[mx.array], mx.array]] = []
    if 0 < params.top_p < 1:
        filters.append(lambda lp: apply_top_p(lp, params.top_p))
    if params.min_p > 0:
        filters.append(lambda lp: apply_min_p(lp, params.min_p))
    if params.top_k > 0:
        # A top_k as large as the vocabulary keeps every token (mlx-lm would raise mid-batch).
        filters.append(
            lambda lp: apply_top_k(lp, params.top_k) if params.top_k < lp.shape[-1] else lp
        )
    seed = params.seed if params.seed is not None else secrets.randbits(63)
    state = {"key": mx.random.key(seed % 2**64)}
    inverse_temperature = 1 / params.temperature

    def sample(logprobs: mx.array) -> mx.array:
        for apply in filters:
            logprobs = apply(logprobs)
        state["key"], step_key = mx.random.split(state["key"])
        return mx.random.categorical(logprobs * inverse_temperature, key=step_key)

    return sample


def probe(params: SamplingParams, vocab_size: int) -> None:
    """Runs fresh copies of the request's sampler and processors once on dummy logits: a
    parameter they cannot take fails this request alone, not the decode step it would share
    with others."""
    logits = mx.zeros((1, vocab_size))
    tokens = mx.array([0], dtype=mx.uint32)
    for process in make_processors(params):
        logits = process(tokens, logits)
    mx.eval(make_sampler(params)(logits))


def make_processors(params: SamplingParams) -> list:
    return make_logits_processors(
        logit_bias=params.logit_bias or None,
        repetition_penalty=params.repetition_penalty if params.repetition_penalty != 1 else None,
        repetition_context_size=PENALTY_WINDOW,
        presence_penalty=params.presence_penalty or None,
        presence_context_size=PENALTY_WINDOW,
        frequency_penalty=params.frequency_penalty or None,
        frequency_context_size=PENALTY_WINDOW,
    )
