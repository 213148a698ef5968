"""Constrained decoding with llguidance: a logits processor that masks what the grammar forbids."""

from __future__ import annotations

import llguidance
import llguidance.hf
import llguidance.numpy
import mlx.core as mx
import numpy as np

from inference.engine.types import EngineError, ErrorKind


def make_ll_tokenizer(tokenizer) -> llguidance.LLTokenizer:
    # mlx-lm's wrapper keeps the Hugging Face tokenizer in _tokenizer.
    return llguidance.hf.from_tokenizer(tokenizer._tokenizer)


def compile_grammar(ll_tokenizer: llguidance.LLTokenizer, grammar: str) -> llguidance.LLMatcher:
    """The grammar compiled for this tokenizer, at its start; any thread may compile one (a
    request's copies each take a deep_copy)."""
    matcher = llguidance.LLMatcher(ll_tokenizer, grammar)
    if matcher.is_error():
        raise EngineError(
            ErrorKind.INVALID_REQUEST,
            f"the output format cannot be enforced: {matcher.get_error()}",
            "response_format",
        )
    return matcher


class GrammarConstraint:
    """Feeds each sampled token to the matcher, then allows only tokens the grammar can take."""

    def __init__(self, matcher: llguidance.LLMatcher, vocab_size: int, prompt_len: int) -> None:
        self._matcher = matcher
        self._seen = prompt_len
        self._bitmask = llguidance.numpy.allocate_token_bitmask(1, vocab_size)

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        new = tokens[self._seen :].tolist()
        self._seen = tokens.shape[0]
        for token in new:
            self._matcher.consume_token(token)
        llguidance.numpy.fill_next_token_bitmask(self._matcher, self._bitmask, 0)
        allowed = np.unpackbits(self._bitmask.view(np.uint8), bitorder="little").astype(bool)
        vocab = logits.shape[-1]
        if allowed.size < vocab:
            allowed = np.pad(allowed, (0, vocab - allowed.size))
        return mx.where(mx.array(allowed[:vocab]), logits, -mx.inf)
