"""The decode batch: sequences past their prompt, one token each per step.

Replaces mlx-lm's GenerationBatch (its KV cache classes and model code stay): the whole batch
is sampled in one vectorized call (sampling.sample) instead of one sampler call per row, and
newcomers join with their prompt's last token still to feed, so their first token comes out of
the shared step rather than a forward pass of their own. Rows that speculate (a drafter, from
SamplingParams.speculative) feed their draft in the same step and may get several tokens
(speculative.py); on models with recurrent state a step that rejects a draft token feeds the
kept ones again to every layer (rewind.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from inference.engine.kv import single_of
from inference.engine.rewind import Rewind, cut_layers, state_layers
from inference.engine.sampling import RowSampler, sample, sample_unseen, samples_unseen
from inference.engine.sequence import Sequence
from inference.engine.speculative import (
    Context,
    SpeculationStats,
    TrackRecord,
    appended,
    best_width,
    block,
    in_order,
    kept,
    plain_numerics,
    roll_back,
    worth_asking,
)

# A token a row produced in a step, with its log probabilities when some row wants them.
Produced = tuple[int, mx.array | None]
# Plain steps (no drafts, processors or log probabilities) are queued one ahead: a step is
# handed to the device before the one before it is read, so building its graph (~1 ms) and the
# engine's delivery of the last tokens overlap the device's work instead of following it, as
# in mlx-lm's generate_step. Off: every step is read before the next is built (A/B runs).
PIPELINE = True


@dataclass(frozen=True)
class Ahead:
    """A plain step handed to the device and not yet read."""

    rows: int  # it fed the batch's first `rows` rows (rows that joined since wait for the next)
    tokens: mx.array  # what it sampled for each of them, computed asynchronously


class DecodeBatch:
    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.rows: list[Sequence] = []
        self.cache: list[Any] = []  # one batched cache per layer, rows in self.rows' order
        self._inputs: list[int] = []  # the token each row feeds next
        self._contexts: list[Context | None] = []  # tokens seen, for logits processors
        # Whether some layer folds positions into a state (recurrent, convolution): a step
        # that rejects a draft token then replays the kept ones (rewind.py).
        self._replays = False
        # Per row: its positions' token indices in physical order once roll_back moved some
        # (None: in order), so that extract() gives the prefix cache its tokens in order.
        self._orders: list[list[int] | None] = []
        self._records: list[TrackRecord] = []  # per row: how right its drafts have been
        # Per row: the first token of a draft that was not worth its place this step,
        # checked against the token the row then produces (a track record kept for nothing).
        self._shadows: list[int | None] = []
        self.stats = SpeculationStats()
        # The model split into layers and output head while some row's drafter reads its
        # hidden states (an MTP head): steps then hand each such row its own.
        self._target: Any = None
        # Drafters that propose together for all their rows (Drafter.group), by kind.
        self._groups: dict[Any, Any] = {}
        # The step queued and not yet read; its rows' next inputs are its tokens, not _inputs.
        self._ahead: Ahead | None = None
        # Whether the batch has held one row since it began: only then are its arrays that
        # row's own (rows joined, or filtered out, leave views into a shared buffer).
        self._alone = False

    def __len__(self) -> int:
        return len(self.rows)

    def join(self, rows: list[Sequence], cache: list[Any], last_tokens: list[int]) -> None:
        """Rows whose prompts are read, all but `last_tokens`, with their batched cache."""
        self._alone = not self.rows and len(rows) == 1
        if not self.rows:
            self.cache = cache
        else:
            for mine, theirs in zip(self.cache, cache, strict=True):
                mine.extend(theirs)
        self.rows.extend(rows)
        self._inputs.extend(last_tokens)
        self._orders.extend(None for _ in rows)
        self._records.extend(TrackRecord() for _ in rows)
        self._shadows.extend(None for _ in rows)
        self._contexts.extend(Context(row.prompt[:-1]) if row.processors else None for row in rows)
        self._replays = bool(state_layers(self.cache))
        self._find_target()

    def _find_target(self) -> None:
        drafters = (row.drafter for row in self.rows if row.drafter is not None)
        self._target = next((d.target for d in drafters if d.target is not None), None)

    def _forward(self, tokens: mx.array) -> tuple[mx.array, mx.array | None]:
        """(logits, hidden states when some row's drafter reads them) of one forward."""
        if self._target is None:
            return self.model(tokens, cache=self.cache), None
        return self._target(tokens, self.cache)

    def step(self) -> list[tuple[Sequence, list[Produced]]]:
        """Feeds every row its next input (and its draft, when some row has one); returns
        each row's new tokens, with their logprobs. Plain batches get the tokens of the step
        queued last time (none on the first), and queue this one (PIPELINE)."""
        if self._plain():
            return self._step_ahead()
        if self._ahead is not None:  # a row that needs to see its tokens joined: catch up
            ahead, self._ahead = self._ahead, None
            return self._read(ahead, fed=False)
        drafts = self._drafts()
        if any(drafts):
            return self._verify(drafts)
        inputs = mx.array(self._inputs, dtype=mx.uint32)
        logits, hidden = self._forward(inputs[:, None])
        logits = self._process(inputs, logits[:, -1, :])
        samplers: list[RowSampler] = [row.sampler for row in self.rows]
        want = any(row.job.params.logprobs for row in self.rows)
        tokens, logprobs = sample(logits, samplers, want)
        appended(self._orders, 1)
        for row, fed in zip(self.rows, self._inputs, strict=True):
            row.fed.append(fed)
        self._inputs = list(tokens)
        out = []
        for i, (row, token) in enumerate(zip(self.rows, tokens, strict=True)):
            if row.drafter is not None:
                if hidden is not None and row.drafter.target is not None:
                    row.drafter.read(hidden[i, :1], [token])
                row.drafter.extend([token])
                self._check_shadow(i, token)
            out.append((row, [(token, None if logprobs is None else logprobs[i])]))
        return out

    def wait(self) -> None:
        """Until the queued step is computed (read or not): work queued after it, a prompt
        read, is then timed on its own."""
        if self._ahead is not None:
            mx.eval(self._ahead.tokens)

    def _plain(self) -> bool:
        """Whether this step's tokens can feed the next before the host reads them."""
        rows = self.rows
        return (
            PIPELINE
            and all(r.drafter is None and not r.processors for r in rows)
            and not any(r.job.params.logprobs for r in rows)
            and samples_unseen([r.sampler for r in rows])
        )

    def _step_ahead(self) -> list[tuple[Sequence, list[Produced]]]:
        """Queues a step for every row, then reads the one queued before it. Rows that joined
        since that one feed their known input; the others feed its tokens, unseen."""
        previous = self._ahead
        covered = previous.rows if previous is not None else 0
        fresh = self._inputs[covered:]
        if previous is not None and not fresh and self._all_end():
            self._ahead = None  # a step after every row's last token would be wasted
            return self._read(previous, fed=False)
        inputs = mx.array(fresh, dtype=mx.uint32)
        if previous is not None:
            inputs = mx.concatenate([previous.tokens.astype(mx.uint32), inputs])
        logits = self.model(inputs[:, None], cache=self.cache)[:, -1, :]
        tokens = sample_unseen(logits, [row.sampler for row in self.rows])
        mx.async_eval(tokens)
        appended(self._orders, 1)
        for row, token in zip(self.rows[covered:], fresh, strict=True):
            row.fed.append(token)
        self._ahead = Ahead(len(self.rows), tokens)
        if previous is None:
            return [(row, []) for row in self.rows]
        return self._read(previous, fed=True)

    def _all_end(self) -> bool:
        """Whether every row's next token is its max_tokens-th (a stop is not known yet)."""
        return all(row.completion_tokens + 1 >= row.max_tokens for row in self.rows)

    def _read(self, ahead: Ahead, fed: bool) -> list[tuple[Sequence, list[Produced]]]:
        """Waits for a queued step's tokens; `fed`: a step queued since already feeds them
        (so they are in the KV cache), else they are the rows' next inputs."""
        values = ahead.tokens.tolist()
        out: list[tuple[Sequence, list[Produced]]] = []
        for i, row in enumerate(self.rows):
            if i >= ahead.rows:
                out.append((row, []))  # joined after it was queued: its token comes next
                continue
            if fed:
                row.fed.append(values[i])
            else:
                self._inputs[i] = values[i]
            out.append((row, [(values[i], None)]))
        return out

    def _drafts(self) -> list[list[int]]:
        """Each row's draft for this step: none for rows that do not speculate, have a
        grammar (its matcher cannot take tokens back), or have one token left to produce."""
        limits = []
        for row, record in zip(self.rows, self._records, strict=True):
            room = row.max_tokens - row.completion_tokens - 1
            if row.drafter is not None and row.drafter.costly:  # a draft model's forwards
                room = min(room, worth_asking(record, len(self.rows)))
            limits.append(0 if row.drafter is None or row.job.params.grammar else max(room, 0))
        drafts = self._propose(limits)
        # Only as many draft tokens as are expected to pay for their place in the step.
        width = best_width(drafts, self._records, self._replays)
        for i, draft in enumerate(drafts):
            if draft and width == 1:
                # What the row produces next tells whether it was right (a costly drafter's
                # guess is made by now: learning from it costs nothing more).
                self._shadows[i] = draft[0]
            elif width == 1 or not draft:
                self._records[i].rest()
        return [d[: width - 1] for d in drafts]

    def _propose(self, limits: list[int]) -> list[list[int]]:
        """Each row's drafter asked for up to its limit; drafters that propose together
        (Drafter.group) asked once for all their rows, those not asked included."""
        drafts: list[list[int]] = [[] for _ in self.rows]
        groups: dict[Any, list[int]] = {}
        for i, (row, limit) in enumerate(zip(self.rows, limits, strict=True)):
            drafter = row.drafter
            if drafter is not None and drafter.group is not None:
                groups.setdefault(drafter.group, []).append(i)
            elif drafter is not None and limit > 0:
                drafts[i] = drafter.propose(limit)
        self._groups = {kind: self._groups.get(kind) for kind in groups}  # others are gone
        for kind, rows in groups.items():
            members = [self.rows[i].drafter for i in rows]
            if self._groups[kind] is None:
                self._groups[kind] = kind(members[0])
            proposals = self._groups[kind].propose(members, [limits[i] for i in rows])
            for i, proposal in zip(rows, proposals, strict=True):
                drafts[i] = proposal
        return drafts

    def _check_shadow(self, i: int, token: int) -> None:
        """Row `i` produced `token` after a draft that was left out: its record learns
        whether that draft's first token was right, as if it had been verified."""
        shadow, self._shadows[i] = self._shadows[i], None
        if shadow is not None:
            self._records[i].update(1, int(shadow == token))

    def _verify(self, drafts: list[list[int]]) -> list[tuple[Sequence, list[Produced]]]:
        """One forward over every row's input and draft; each row keeps the draft tokens its
        own samples confirm, plus the sample after them (speculative.py)."""
        fed = block(self._inputs, drafts)
        width = len(fed[0])
        lengths = [len(d) + 1 for d in drafts]
        rewind = Rewind(self.cache, lengths)  # no row's padding reaches a recurrent state
        with plain_numerics(len(self.rows)):  # sampling evaluates the pass
            logits, hidden = self._forward(mx.array(fed, dtype=mx.uint32))
            tokens, logprobs = self._sample_block(fed, drafts, logits)
        rewind.settle()
        out, keeps, start = [], [], 0
        for i, (row, draft) in enumerate(zip(self.rows, drafts, strict=True)):
            n = kept(tokens[start : start + len(draft)], draft)
            new = tokens[start : start + n + 1]
            lps = [None if logprobs is None else logprobs[start + j] for j in range(n + 1)]
            out.append((row, list(zip(new, lps, strict=True))))
            self._advance(i, fed[i][: n + 1], new, len(draft) - n)
            if hidden is not None and row.drafter is not None and row.drafter.target is not None:
                row.drafter.read(hidden[i, : n + 1], new)
            keeps.append(n + 1)
            if draft:
                self._records[i].update(len(draft), n)
            self.stats.count(len(draft), n, row.job.params.speculative)
            start += len(draft) + 1
        if rewind.needs_replay and keeps != lengths:
            width = self._replay(rewind, fed, keeps, width)
        else:
            rewind.cut_windows(keeps)
        appended(self._orders, width)
        roll_back(self.cache, [width - k for k in keeps], self._orders)
        self.stats.steps += 1
        return out

    def _replay(self, rewind: Rewind, fed: list[list[int]], keeps: list[int], width: int) -> int:
        """Some row rejected a draft token, which the layers that cannot drop positions have
        taken in: they get their state from before the step back, and every layer is fed
        each row's kept tokens again (the cut layers drop the whole step first). Returns the
        replay's width, whose padding roll_back then drops."""
        for layer in cut_layers(self.cache):
            layer.trim(width)
        rewind.back(keeps)
        again = max(keeps)
        tokens = [row[:k] + [0] * (again - k) for row, k in zip(fed, keeps, strict=True)]
        with plain_numerics(len(self.rows)):  # the logits are never read: no head computed
            self.model(mx.array(tokens, dtype=mx.uint32), cache=self.cache)
            rewind.settle()
            mx.eval([layer.state for layer in self.cache])
        self.stats.replays += 1
        return again

    def _sample_block(
        self, fed: list[list[int]], drafts: list[list[int]], logits: mx.array
    ) -> tuple[list[int], mx.array | None]:
        """Samples each row at its input's position and its draft's (not its padding's), in
        row order; every position of a sampling row draws with its own next uniform."""
        width = len(fed[0])
        positions = [(i, j) for i, d in enumerate(drafts) for j in range(len(d) + 1)]
        where = mx.array([i * width + j for i, j in positions])
        flat = self._process_block(fed, drafts, logits.reshape(-1, logits.shape[-1])[where])
        samplers = [self.rows[i].sampler for i, _ in positions]
        given: list[float | None] = []
        for row, draft in zip(self.rows, drafts, strict=True):
            n = len(draft) + 1
            given.extend([None] * n if row.sampler.greedy else row.sampler.peek(n))
        want = any(row.job.params.logprobs for row in self.rows)
        return sample(flat, samplers, want, given)

    def _advance(self, i: int, fed: list[int], new: list[int], rejected: int) -> None:
        """Row `i` kept `fed` in its cache and produced `new`; its last token feeds next."""
        row = self.rows[i]
        row.fed.extend(fed)
        if not row.sampler.greedy:
            row.sampler.consume(len(new))
        if row.drafter is not None:
            row.drafter.extend(new)
        context = self._contexts[i]
        if context is not None:
            context.trim(rejected)
        self._inputs[i] = new[-1]

    def _process_block(self, fed: list[list[int]], drafts: list[list[int]], flat: mx.array):
        """Processors (penalties, logit_bias) at each fed position, each position seeing the
        draft tokens before it (grammar rows have no draft: one position)."""
        if not any(self._contexts):
            return flat
        rows, start = [], 0
        for i, (context, draft) in enumerate(zip(self._contexts, drafts, strict=True)):
            n = len(draft) + 1
            if context is None:
                rows.append(flat[start : start + n])
            else:
                base = context.size
                seen = context.update_and_fetch(mx.array(fed[i][:n], dtype=mx.int32))
                for j in range(n):
                    row = flat[start + j : start + j + 1]
                    for process in self.rows[i].processors:
                        row = process(seen[: base + j + 1], row)
                    rows.append(row)
            start += n
        return mx.concatenate(rows, axis=0)

    def _process(self, inputs: mx.array, logits: mx.array) -> mx.array:
        """Penalties, logit_bias and grammars: per row, only for rows that have them."""
        if not any(self._contexts):
            return logits
        rows = []
        for i, context in enumerate(self._contexts):
            row = logits[i : i + 1]
            if context is not None:
                seen = context.update_and_fetch(inputs[i : i + 1])
                for process in self.rows[i].processors:
                    row = process(seen, row)
            rows.append(row)
        return mx.concatenate(rows, axis=0)

    def keep(self, indices: list[int]) -> None:
        """Drops every row not in `indices`, with its KV memory."""
        if len(indices) == len(self.rows):
            return
        self._keep_ahead(indices)
        self.rows = [self.rows[i] for i in indices]
        self._inputs = [self._inputs[i] for i in indices]
        self._orders = [self._orders[i] for i in indices]
        self._records = [self._records[i] for i in indices]
        self._shadows = [self._shadows[i] for i in indices]
        self._contexts = [self._contexts[i] for i in indices]
        self._find_target()
        if not indices:
            self.cache = []
            return
        for layer in self.cache:
            layer.filter(indices)

    def _keep_ahead(self, indices: list[int]) -> None:
        """The queued step's tokens of the rows that stay (indices ascend: they stay first)."""
        if self._ahead is None:
            return
        inside = [i for i in indices if i < self._ahead.rows]
        tokens = self._ahead.tokens[mx.array(inside)] if inside else None
        self._ahead = Ahead(len(inside), tokens) if tokens is not None else None

    def extract(self, index: int, leaving: bool = False) -> list[Any]:
        """Row `index`'s cache as a single sequence's (for the prefix cache): a copy, or when
        the row `leaving` is the only one the batch ever held, its own arrays handed over
        (kv.single_of), where every layer has that form."""
        if leaving and self._alone and self._orders[0] is None:
            whole = [single_of(layer) for layer in self.cache]
            if all(layer is not None for layer in whole):
                return whole
        layers = [layer.extract(index) for layer in self.cache]
        return in_order(self.cache, layers, self._orders[index])
