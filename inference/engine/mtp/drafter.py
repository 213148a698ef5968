"""One sequence's MTP drafter: the model's own head guesses the tokens after the next.

The prompt reader and the decode batch hand it the target's hidden states with the tokens
that followed them (`read`): the prompt's, then each step's kept positions (a verification's
rejected ones never reach it, so its cache never holds them). It reads them into its head's
cache only when asked for a draft, or once enough have gathered; the head's output at the last
of them is the first guess, and each further guess feeds the head its own output and the
guess before (`chain`). Those chained positions are cut from its cache before it reads on.
Guesses are greedy (all probability on one token), the case the verification's acceptance
rule assumes (speculative.py), so sampled rows keep the target's distribution.
"""

from __future__ import annotations

import mlx.core as mx

from inference.engine.drafter import Drafter
from inference.engine.mtp.head import MtpHeads

READ_CHUNK = 256  # positions read per step when asked (a long prompt over several)
GATHER = 64  # positions kept unread before they are read anyway (memory stays bounded)


class MtpDrafter(Drafter):
    costly = True  # each guess is a forward of the head (one layer and the output head)

    def __init__(self, heads: MtpHeads, length: int, vocab_size: int) -> None:
        self.heads = heads
        self.target = heads.target
        self.length = length
        self.vocab_size = vocab_size  # the target's: a guess past it is never proposed
        self.cache = heads.make_cache()
        self._unread: list[tuple[mx.array, list[int]]] = []  # (hidden (n, width), n tokens)
        self._waiting = 0  # positions in _unread
        self._chained = 0  # the last draft's positions in the cache, cut before reading on
        # After the last position read: the head's output there (what a chained guess feeds
        # on) and its guess (the token after the one that followed that position).
        self._last: tuple[mx.array, mx.array] | None = None

    def read(self, hidden: mx.array, tokens: list[int]) -> None:
        if not tokens:
            return
        self._unread.append((hidden, tokens))
        self._waiting += len(tokens)
        if self._waiting >= GATHER:
            self._catch_up(self._waiting)

    def extend(self, tokens: list[int]) -> None:
        """The tokens come with their hidden states (read)."""

    def propose(self, limit: int) -> list[int]:
        limit = min(limit, self.length)
        if limit <= 0 or not self._catch_up(READ_CHUNK) or self._last is None:
            return []
        hidden, guess = self._last
        guesses = [guess]
        for _ in range(limit - 1):
            hidden, logits = self.heads.forward(hidden, guesses[-1][None], self.cache)
            self._chained += 1
            guesses.append(mx.argmax(logits, axis=-1))
        draft = []
        for token in mx.concatenate(guesses).tolist():  # one wait for the whole chain
            if token >= self.vocab_size:
                break
            draft.append(token)
        return draft

    def _catch_up(self, most: int) -> bool:
        """Reads up to `most` waiting positions (the last draft's chained ones cut first);
        whether none is left waiting."""
        if self._chained:
            self.cache.trim(self._chained)
            self._chained = 0
        if not self._unread:
            return True
        hidden, tokens = self._take(most)
        chained, logits = self.heads.forward(hidden[None], mx.array([tokens]), self.cache)
        self._last = (chained[:, -1:, :], mx.argmax(logits, axis=-1))
        mx.eval(self._last, self.cache.state)
        return not self._unread

    def _take(self, most: int) -> tuple[mx.array, list[int]]:
        parts, tokens = [], []
        while self._unread and len(tokens) < most:
            hidden, ids = self._unread.pop(0)
            room = most - len(tokens)
            if len(ids) > room:  # the rest waits for the next step
                self._unread.insert(0, (hidden[room:], ids[room:]))
                hidden, ids = hidden[:room], ids[:room]
            parts.append(hidden)
            tokens.extend(ids)
        self._waiting -= len(tokens)
        return mx.concatenate(parts, axis=0), tokens
