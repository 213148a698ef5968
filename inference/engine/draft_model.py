"""A draft model's guesses for speculative decoding (drafting.py's drafter for
`speculative: draft_model`): the catalog's smaller model of the same vocabulary, read with the
model it drafts for (pool.read_draft)."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import KVCache, can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache

from inference.engine.drafter import Drafter
from inference.engine.rewind import Saved, leaves

DRAFT_CHUNK = 256  # tokens a draft model catches up on per step (a prompt over several)


class ModelDrafter(Drafter):
    """A draft model's greedy guesses. Its cache holds the K/V of `cached`, which always
    starts with the sequence's tokens: after a step, the part the target rejected is cut off
    and the accepted tokens not yet read are read with the next proposal. A draft model whose
    layers cannot be cut (recurrent state, sliding windows) keeps them as they were before each
    proposal (rewind.Saved) and goes back there. A greedy draft puts all its probability on
    its token, the case the verification's acceptance rule assumes (speculative.py), so
    sampled rows keep the target's distribution."""

    costly = True

    def __init__(self, model: Any, tokens: list[int], length: int, vocab_size: int) -> None:
        self.model = model
        self.tokens = list(tokens)
        self.length = length
        self.vocab_size = vocab_size  # the target's: a draft id past it is never proposed
        self.cache = make_prompt_cache(model)
        self.cached: list[int] = []  # tokens whose K/V the cache holds, in order
        # Before the last proposal: how many tokens were cached, and the layers that cannot
        # be cut as they were then (None: every layer cuts, or it was gone back to).
        self._mark: tuple[int, Saved] | None = None
        self.fresh_reads = 0  # times the cache was dropped and the sequence read anew

    def extend(self, tokens: list[int]) -> None:
        self.tokens.extend(tokens)

    def propose(self, limit: int) -> list[int]:
        limit = min(limit, self.length)
        if limit <= 0 or not self._catch_up():
            return []
        held = [c for c in leaves(self.cache) if not isinstance(c, KVCache)]
        self._mark = (len(self.cached), Saved(held)) if held else None
        token, draft = self.tokens[-1], []
        for _ in range(limit):
            logits = self.model(mx.array([[token]]), cache=self.cache)
            self.cached.append(token)
            token = int(mx.argmax(logits[0, -1]).item())
            if token >= self.vocab_size:
                break
            draft.append(token)
        return draft

    def _catch_up(self) -> bool:
        """The cache cut back to where it agrees with the sequence, then fed the sequence's
        tokens up to (not with) its last, which the next proposal starts from: at most
        DRAFT_CHUNK of them per step, so that reading a long prompt never holds up the other
        rows' step for long (no draft until it is read). Whether it is caught up."""
        target = self.tokens[:-1]
        agree = 0
        for mine, theirs in zip(self.cached, target, strict=False):  # either may be longer
            if mine != theirs:
                break
            agree += 1
        extra = len(self.cached) - agree
        if extra and self._go_back(agree):
            extra = 0
        if extra and not can_trim_prompt_cache(self.cache):  # a rotated window: read anew
            self.cache, self.cached, agree, extra = make_prompt_cache(self.model), [], 0, 0
            self.fresh_reads += 1
        if extra:
            trim_prompt_cache(self.cache, extra)
            del self.cached[agree:]
        chunk = target[agree : agree + DRAFT_CHUNK]
        if chunk:
            self.model(mx.array([chunk]), cache=self.cache)
            mx.eval([c.state for c in self.cache])
            self.cached.extend(chunk)
        return len(self.cached) == len(target)

    def _go_back(self, agree: int) -> bool:
        """The cache as it was before the last proposal, if that is within what agrees: plain
        K/V cut there, the other layers' saved state back (once: they change it in place)."""
        if self._mark is None or self._mark[0] > agree:
            return False
        at, saved = self._mark
        self._mark = None
        for layer in leaves(self.cache):
            if isinstance(layer, KVCache):
                layer.trim(len(self.cached) - at)
        saved.restore()
        del self.cached[at:]
        return True
