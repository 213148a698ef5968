"""Constrained decoding with llguidance: a logits processor that masks what the grammar forbids."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from copy import copy

import llguidance
import llguidance.hf
import llguidance.numpy
import mlx.core as mx
import numpy as np

from inference.engine.types import EngineError, ErrorKind

# llguidance's tokenizers by what they were built from: building one takes about a second
# (its token trie and slices), and the models a server holds often share a vocabulary (the
# quantizations and fine-tunes of one model, a draft beside its target), as do a model's loads.
_LL_KEPT = 4
_ll_tokenizers: OrderedDict[tuple, llguidance.LLTokenizer] = OrderedDict()
_ll_lock = threading.Lock()


def make_ll_tokenizer(tokenizer) -> llguidance.LLTokenizer:
    # mlx-lm's wrapper keeps the Hugging Face tokenizer in _tokenizer.
    return ll_tokenizer_of(tokenizer._tokenizer)


def ll_tokenizer_of(hf) -> llguidance.LLTokenizer:
    """llguidance's tokenizer for a Hugging Face one, as llguidance.hf.from_tokenizer builds
    it, shared by every tokenizer with the same vocabulary."""
    if not hasattr(hf, "backend_tokenizer"):
        return llguidance.hf.from_tokenizer(hf)  # it says why it cannot
    backend = copy(hf.backend_tokenizer)
    backend.no_padding()
    backend.no_truncation()
    serialized, eos = backend.to_str(), hf.eos_token_id
    key = (hashlib.sha256(serialized.encode()).hexdigest(), eos)
    with _ll_lock:
        if key in _ll_tokenizers:
            _ll_tokenizers.move_to_end(key)
            return _ll_tokenizers[key]
    built = llguidance.LLTokenizer(serialized, eos_token=eos)
    with _ll_lock:
        _ll_tokenizers[key] = built
        while len(_ll_tokenizers) > _LL_KEPT:
            _ll_tokenizers.popitem(last=False)
    return built


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
