"""The decode batch's speculative step (decode.py): each speculating row's drafter proposes a
draft, as wide as is expected to pay, and one forward over every row's input and draft keeps
the draft tokens each row's own samples confirm, plus the sample after them
(speculative.py). On models with recurrent state a step that rejects a draft token feeds the
kept ones again to every layer (rewind.py)."""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from inference.engine.decode_rows import RowTable
from inference.engine.rewind import Rewind, cut_layers
from inference.engine.sampling import sample
from inference.engine.sequence import Sequence
from inference.engine.speculative import (
    SpeculationStats,
    appended,
    best_width,
    block,
    kept,
    plain_numerics,
    roll_back,
    worth_asking,
)

# A token a row produced in a step, with its log probabilities when some row wants them.
Produced = tuple[int, mx.array | None]


class DraftVerifier:
    """Engine thread only; works on the batch's RowTable (records and shadows are per row
    there, so that rows joining and leaving keep them in step)."""

    def __init__(self, table: RowTable) -> None:
        self._table = table
        self.stats = SpeculationStats()
        # Drafters that propose together for all their rows (Drafter.group), by kind.
        self.groups: dict[Any, Any] = {}

    def drafts(self) -> list[list[int]]:
        """Each row's draft for this step: none for rows that do not speculate, have a
        grammar (its matcher cannot take tokens back), or have one token left to produce."""
        table = self._table
        limits = []
        for row, record in zip(table.rows, table.records, strict=True):
            room = row.max_tokens - row.completion_tokens - 1
            if row.drafter is not None and row.drafter.costly:  # a draft model's forwards
                room = min(room, worth_asking(record, len(table.rows)))
            limits.append(0 if row.drafter is None or row.job.params.grammar else max(room, 0))
        drafts = self._propose(limits)
        # Only as many draft tokens as are expected to pay for their place in the step.
        width = best_width(drafts, table.records, table.replays)
        for i, draft in enumerate(drafts):
            if draft and width == 1:
                # What the row produces next tells whether it was right (a costly drafter's
                # guess is made by now: learning from it costs nothing more).
                table.shadows[i] = draft[0]
            elif width == 1 or not draft:
                table.records[i].rest()
        return [d[: width - 1] for d in drafts]

    def _propose(self, limits: list[int]) -> list[list[int]]:
        """Each row's drafter asked for up to its limit; drafters that propose together
        (Drafter.group) asked once for all their rows, those not asked included."""
        rows = self._table.rows
        drafts: list[list[int]] = [[] for _ in rows]
        groups: dict[Any, list[int]] = {}
        for i, (row, limit) in enumerate(zip(rows, limits, strict=True)):
            drafter = row.drafter
            if drafter is not None and drafter.group is not None:
                groups.setdefault(drafter.group, []).append(i)
            elif drafter is not None and limit > 0:
                drafts[i] = drafter.propose(limit)
        self.groups = {kind: self.groups.get(kind) for kind in groups}  # others are gone
        for kind, members_at in groups.items():
            members = [rows[i].drafter for i in members_at]
            if self.groups[kind] is None:
                self.groups[kind] = kind(members[0])
            proposals = self.groups[kind].propose(members, [limits[i] for i in members_at])
            for i, proposal in zip(members_at, proposals, strict=True):
                drafts[i] = proposal
        return drafts

    def check_shadow(self, i: int, token: int) -> None:
        """Row `i` produced `token` after a draft that was left out: its record learns
        whether that draft's first token was right, as if it had been verified."""
        table = self._table
        shadow, table.shadows[i] = table.shadows[i], None
        if shadow is not None:
            table.records[i].update(1, int(shadow == token))

    def verify(self, drafts: list[list[int]]) -> list[tuple[Sequence, list[Produced]]]:
        """One forward over every row's input and draft; each row keeps the draft tokens its
        own samples confirm, plus the sample after them (speculative.py)."""
        table = self._table
        fed = block(table.inputs, drafts)
        width = len(fed[0])
        lengths = [len(d) + 1 for d in drafts]
        rewind = Rewind(table.cache, lengths)  # no row's padding reaches a recurrent state
        with plain_numerics(len(table.rows)):  # sampling evaluates the pass
            logits, hidden = table.forward(mx.array(fed, dtype=mx.uint32))
            tokens, logprobs = self._sample_block(fed, drafts, logits)
        rewind.settle()
        out, keeps, start = [], [], 0
        for i, (row, draft) in enumerate(zip(table.rows, drafts, strict=True)):
            n = kept(tokens[start : start + len(draft)], draft)
            new = tokens[start : start + n + 1]
            lps = [None if logprobs is None else logprobs[start + j] for j in range(n + 1)]
            out.append((row, list(zip(new, lps, strict=True))))
            self._advance(i, fed[i][: n + 1], new, len(draft) - n)
            if hidden is not None and row.drafter is not None and row.drafter.target is not None:
                row.drafter.read(hidden[i, : n + 1], new)
            keeps.append(n + 1)
            if draft:
                table.records[i].update(len(draft), n)
            self.stats.count(len(draft), n, row.job.params.speculative)
            start += len(draft) + 1
        if rewind.needs_replay and keeps != lengths:
            width = self._replay(rewind, fed, keeps, width)
        else:
            rewind.cut_windows(keeps)
        appended(table.orders, width)
        roll_back(table.cache, [width - k for k in keeps], table.orders)
        self.stats.steps += 1
        return out

    def _replay(self, rewind: Rewind, fed: list[list[int]], keeps: list[int], width: int) -> int:
        """Some row rejected a draft token, which the layers that cannot drop positions have
        taken in: they get their state from before the step back, and every layer is fed
        each row's kept tokens again (the cut layers drop the whole step first). Returns the
        replay's width, whose padding roll_back then drops."""
        table = self._table
        for layer in cut_layers(table.cache):
            layer.trim(width)
        rewind.back(keeps)
        again = max(keeps)
        tokens = [row[:k] + [0] * (again - k) for row, k in zip(fed, keeps, strict=True)]
        with plain_numerics(len(table.rows)), table.adapted():  # the logits are never read
            table.model(mx.array(tokens, dtype=mx.uint32), cache=table.cache)
            rewind.settle()
            mx.eval([layer.state for layer in table.cache])
        self.stats.replays += 1
        return again

    def _sample_block(
        self, fed: list[list[int]], drafts: list[list[int]], logits: mx.array
    ) -> tuple[list[int], mx.array | None]:
        """Samples each row at its input's position and its draft's (not its padding's), in
        row order; every position of a sampling row draws with its own next uniform."""
        rows = self._table.rows
        width = len(fed[0])
        positions = [(i, j) for i, d in enumerate(drafts) for j in range(len(d) + 1)]
        where = mx.array([i * width + j for i, j in positions])
        flat = self._process_block(fed, drafts, logits.reshape(-1, logits.shape[-1])[where])
        samplers = [rows[i].sampler for i, _ in positions]
        given: list[float | None] = []
        for row, draft in zip(rows, drafts, strict=True):
            n = len(draft) + 1
            given.extend([None] * n if row.sampler.greedy else row.sampler.peek(n))
        want = any(row.job.params.logprobs for row in rows)
        return sample(flat, samplers, want, given)

    def _advance(self, i: int, fed: list[int], new: list[int], rejected: int) -> None:
        """Row `i` kept `fed` in its cache and produced `new`; its last token feeds next."""
        table = self._table
        row = table.rows[i]
        row.fed.extend(fed)
        if not row.sampler.greedy:
            row.sampler.consume(len(new))
        if row.drafter is not None:
            row.drafter.extend(new)
        context = table.contexts[i]
        if context is not None:
            context.trim(rejected)
        table.inputs[i] = new[-1]

    def _process_block(self, fed: list[list[int]], drafts: list[list[int]], flat: mx.array):
        """Processors (penalties, logit_bias) at each fed position, each position seeing the
        draft tokens before it (grammar rows have no draft: one position)."""
        table = self._table
        if not any(row.processors for row in table.rows):
            return flat
        rows, start = [], 0
        for i, (context, draft) in enumerate(zip(table.contexts, drafts, strict=True)):
            n = len(draft) + 1
            processors = table.rows[i].processors
            if not processors:
                rows.append(flat[start : start + n])
                start += n
                continue
            base = 0 if context is None else context.size
            seen = None
            if context is not None:
                seen = context.update_and_fetch(mx.array(fed[i][:n], dtype=mx.int32))
            for j in range(n):
                row = flat[start + j : start + j + 1]
                for process in processors:
                    row = process(None if seen is None else seen[: base + j + 1], row)
                rows.append(row)
            start += n
        return mx.concatenate(rows, axis=0)
