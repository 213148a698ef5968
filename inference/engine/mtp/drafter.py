"""MTP drafters: the model's own head guesses the tokens after the next.

The prompt reader and the decode batch hand each row's drafter the target's hidden states with
the tokens that followed them (`read`): the prompt's, then each step's kept positions (a
verification's rejected ones never reach it, so no head cache ever holds them). The head's
output at the last position read gives the first guess; each further guess feeds the head its
own output and the guess before. Guesses are greedy (all probability on one token), the case
the verification's acceptance rule assumes (speculative.py), so sampled rows keep the target's
distribution.

The rows of one decode batch draft together (`MtpBatch`): their heads' K/V live in one batched
cache, a step reads every row's new positions in one forward (right-padded to the most any row
has; the padding is then dropped as a verification's rejected positions are,
speculative.roll_back) and each chained guess is one forward for all rows. So the output head,
the largest read of a guess on a real model, is read once per guess for the whole batch, not
once per row. A row reads its prompt alone, in its own cache, which joins the batch's when the
batch first asks it for guesses; the chained guesses' positions are cut before the next read.
"""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache, KVCache

from inference.engine.drafter import Drafter
from inference.engine.mtp.head import MtpHeads
from inference.engine.speculative import roll_back

GATHER = 64  # positions a row leaves unread before they are read anyway (bounded memory)


class MtpDrafter(Drafter):
    costly = True  # each guess is a forward of the head (one layer and the output head)

    def __init__(self, heads: MtpHeads, length: int, vocab_size: int) -> None:
        self.heads = heads
        self.target = heads.target
        self.length = length
        self.vocab_size = vocab_size  # the target's: a guess past it is never proposed
        self.cache: KVCache | None = KVCache()  # its own until a batch adopts it
        self._unread: list[tuple[mx.array, list[int]]] = []  # (hidden (n, width), n tokens)
        self.waiting = 0  # positions in _unread
        # At the last position read: the head's output there as a chained guess feeds on it,
        # and as the output head reads it (each (1, 1, width)).
        self.last: tuple[mx.array, mx.array] | None = None
        self._alone: MtpBatch | None = None  # a batch of its own, when asked outside one

    @staticmethod
    def group(first: MtpDrafter) -> MtpBatch:
        """What drafts for every MTP row of a decode batch at once."""
        return MtpBatch(first)

    def read(self, hidden: mx.array, tokens: list[int]) -> None:
        if not tokens:
            return
        self._unread.append((hidden, tokens))
        self.waiting += len(tokens)
        if self.cache is not None and self.waiting >= GATHER:  # its prompt, read alone
            self._read_alone()

    def extend(self, tokens: list[int]) -> None:
        """The tokens come with their hidden states (read)."""

    def propose(self, limit: int) -> list[int]:
        """Guesses outside a decode batch: a batch of its own."""
        if self._alone is None:
            self._alone = MtpBatch(self)
        return self._alone.propose([self], [limit])[0]

    def take_all(self) -> tuple[mx.array | None, list[int]]:
        """Every waiting position: (hidden states (n, width), the n tokens that followed)."""
        parts, tokens = [h for h, _ in self._unread], [t for _, ids in self._unread for t in ids]
        self._unread, self.waiting = [], 0
        return (mx.concatenate(parts) if parts else None), tokens

    def adopt(self) -> KVCache:
        """Its cache, for a batch to hold from now on. Adopted once already (a row moved to
        another batch), it starts again from what it reads next."""
        cache, self.cache = self.cache, None
        if cache is None:
            cache, self.last = KVCache(), None
        return cache

    def _read_alone(self) -> None:
        hidden, tokens = self.take_all()
        chained, out = self.heads.head(
            hidden[None], self.target.embed(mx.array([tokens])), self.cache
        )
        self.last = (chained[:, -1:], out[:, -1:])
        mx.eval(self.last, self.cache.state)


class MtpBatch:
    def __init__(self, first: MtpDrafter) -> None:
        self.heads = first.heads
        self.vocab_size = first.vocab_size
        self.drafters: list[MtpDrafter] = []  # in the decode batch's order
        self.cache: BatchKVCache | None = None
        self._chained = 0  # the last guesses' positions, cut before the next read

    def propose(self, drafters: list[MtpDrafter], limits: list[int]) -> list[list[int]]:
        """Each row's guesses, up to its limit (0: none; its positions are still read when
        some row is asked, or once many have gathered)."""
        self._cut_chain()
        self._follow(drafters)
        limits = [min(limit, d.length) for limit, d in zip(limits, drafters, strict=True)]
        waiting = [d.waiting for d in drafters]
        most = max(limits, default=0)
        none: list[list[int]] = [[] for _ in drafters]
        if (most <= 0 and max(waiting, default=0) < GATHER) or not any(
            n or d.last is not None for n, d in zip(waiting, drafters, strict=True)
        ):
            return none
        hidden, out = self._read(waiting)
        if most <= 0:
            return none
        head, embed = self.heads.target.head, self.heads.target.embed
        guesses = [mx.argmax(head(out)[:, -1, :], axis=-1)]
        for _ in range(most - 1):
            hidden, out = self.heads.head(hidden, embed(guesses[-1][:, None]), self.cache)
            self._chained += 1
            guesses.append(mx.argmax(head(out)[:, -1, :], axis=-1))
        rows = mx.stack(guesses, axis=1).tolist()  # one wait for every row's chain
        return [
            self._usable(row[:limit]) if d.last is not None or n else []
            for row, limit, d, n in zip(rows, limits, drafters, waiting, strict=True)
        ]

    def _usable(self, guesses: list[int]) -> list[int]:
        """Up to the first id past the target's vocabulary (a padded output head's)."""
        for n, token in enumerate(guesses):
            if token >= self.vocab_size:
                return guesses[:n]
        return guesses

    def _cut_chain(self) -> None:
        if self._chained and self.cache is not None:
            self.cache.trim(self._chained)
        self._chained = 0

    def _follow(self, drafters: list[MtpDrafter]) -> None:
        """The rows as the decode batch's are now: those that left dropped (it keeps its
        order), those that joined appended with their caches."""
        now = {id(d) for d in drafters}
        keep = [i for i, d in enumerate(self.drafters) if id(d) in now]
        if len(keep) < len(self.drafters):
            if not keep:
                self.cache = None
            elif self.cache is not None:
                self.cache.filter(keep)
            self.drafters = [self.drafters[i] for i in keep]
        known = {id(d) for d in self.drafters}
        for drafter in [d for d in drafters if id(d) not in known]:
            joined = BatchKVCache.merge([drafter.adopt()])
            if self.cache is None:
                self.cache = joined
            else:
                self.cache.extend(joined)
            self.drafters.append(drafter)
        assert [id(d) for d in self.drafters] == [id(d) for d in drafters]

    def _read(self, waiting: list[int]) -> tuple[mx.array, mx.array]:
        """Every row's waiting positions read in one forward; the head's output at each row's
        last position (what it read last, for a row with none waiting), each (B, 1, width)."""
        width = max(waiting)
        if width:
            self._read_block(waiting, width)
        size = self.heads.width
        nothing = (mx.zeros((1, 1, size)),) * 2  # a row that has read nothing: not asked
        last = [d.last or nothing for d in self.drafters]
        return mx.concatenate([h for h, _ in last]), mx.concatenate([o for _, o in last])

    def _read_block(self, waiting: list[int], width: int) -> None:
        states, tokens = [], []
        size = self.heads.width
        for drafter, n in zip(self.drafters, waiting, strict=True):
            hidden, ids = drafter.take_all()
            pad = mx.zeros((width - n, size), dtype=mx.float32 if hidden is None else hidden.dtype)
            states.append(pad if hidden is None else mx.concatenate([hidden, pad]))
            tokens.append(ids + [0] * (width - n))
        embedded = self.heads.target.embed(mx.array(tokens))
        chained, out = self.heads.head(mx.stack(states), embedded, self.cache)
        for i, (drafter, n) in enumerate(zip(self.drafters, waiting, strict=True)):
            if n:
                drafter.last = (chained[i : i + 1, n - 1 : n], out[i : i + 1, n - 1 : n])
        roll_back([self.cache], [width - n for n in waiting], [None] * len(waiting))
