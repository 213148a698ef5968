"""The decode batch: sequences past their prompt, one token each per step.

Replaces mlx-lm's GenerationBatch (its KV cache classes and model code stay): the whole batch
is sampled in one vectorized call (sampling.sample) instead of one sampler call per row, and
newcomers join with their prompt's last token still to feed, so their first token comes out of
the shared step rather than a forward pass of their own. Rows that speculate (a drafter, from
SamplingParams.speculative) feed their draft in the same step and may get several tokens
(decode_verify.py, speculative.py); on models with recurrent state a step that rejects a draft
token feeds the kept ones again to every layer (rewind.py). The rows and their per-row lists
are kept in decode_rows.py; this module holds the plain step and its pipelining.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from inference.engine.decode_rows import RowTable
from inference.engine.decode_verify import DraftVerifier, Produced
from inference.engine.sampling import (
    RowSampler,
    needs_history,
    sample,
    sample_unseen,
    samples_unseen,
)
from inference.engine.sequence import Sequence
from inference.engine.speculative import appended

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
    """Engine thread only (a ModelRunner's). Its rows live in a RowTable; a step with drafts
    is the DraftVerifier's; plain steps, pipelined or not, are stepped here."""

    def __init__(self, model: nn.Module, lora: Any = None) -> None:
        self.model = model
        self._table = RowTable(model, lora)  # lora: the model's adapters (lora.LoRASet)
        self._verifier = DraftVerifier(self._table)
        self.stats = self._verifier.stats
        # The step queued and not yet read; its rows' next inputs are its tokens, not inputs.
        self._ahead: Ahead | None = None

    # The rows and the cache are the table's; reading them here keeps the batch's face.
    @property
    def rows(self) -> list[Sequence]:
        return self._table.rows

    @property
    def cache(self) -> list[Any]:
        return self._table.cache

    @property
    def _orders(self) -> list[list[int] | None]:
        return self._table.orders  # tests check how roll_back left a row's positions

    @property
    def _groups(self) -> dict[Any, Any]:
        return self._verifier.groups  # bench/mtp_cost.py times a group's proposals

    def __len__(self) -> int:
        return len(self._table.rows)

    def join(self, rows: list[Sequence], cache: list[Any], last_tokens: list[int]) -> None:
        """Rows whose prompts are read, all but `last_tokens`, with their batched cache."""
        self._table.join(rows, cache, last_tokens)

    def step(self) -> list[tuple[Sequence, list[Produced]]]:
        """Feeds every row its next input (and its draft, when some row has one); returns
        each row's new tokens, with their logprobs. Plain batches get the tokens of the step
        queued last time (none on the first), and queue this one (PIPELINE)."""
        if self._plain():
            return self._step_ahead()
        if self._ahead is not None:  # a row that needs to see its tokens joined: catch up
            ahead, self._ahead = self._ahead, None
            return self._read(ahead, fed=False)
        drafts = self._verifier.drafts()
        if any(drafts):
            return self._verifier.verify(drafts)
        table = self._table
        inputs = mx.array(table.inputs, dtype=mx.uint32)
        logits, hidden = table.forward(inputs[:, None])
        logits = self._process(inputs, logits[:, -1, :])
        samplers: list[RowSampler] = [row.sampler for row in table.rows]
        want = any(row.job.params.logprobs for row in table.rows)
        tokens, logprobs = sample(logits, samplers, want)
        appended(table.orders, 1)
        for row, fed in zip(table.rows, table.inputs, strict=True):
            row.fed.append(fed)
        table.inputs = list(tokens)
        out = []
        for i, (row, token) in enumerate(zip(table.rows, tokens, strict=True)):
            if row.drafter is not None:
                if hidden is not None and row.drafter.target is not None:
                    row.drafter.read(hidden[i, :1], [token])
                row.drafter.extend([token])
                self._verifier.check_shadow(i, token)
            out.append((row, [(token, None if logprobs is None else logprobs[i])]))
        return out

    def wait(self) -> None:
        """Until the queued step is computed (read or not): work queued after it, a prompt
        read, is then timed on its own."""
        if self._ahead is not None:
            mx.eval(self._ahead.tokens)

    def _plain(self) -> bool:
        """Whether this step's tokens can feed the next before the host reads them."""
        rows = self._table.rows
        return (
            PIPELINE
            and all(r.drafter is None and not needs_history(r.processors) for r in rows)
            and not any(r.job.params.logprobs for r in rows)
            and samples_unseen([r.sampler for r in rows])
        )

    def _step_ahead(self) -> list[tuple[Sequence, list[Produced]]]:
        """Queues a step for every row, then reads the one queued before it. Rows that joined
        since that one feed their known input; the others feed its tokens, unseen."""
        table = self._table
        previous = self._ahead
        covered = previous.rows if previous is not None else 0
        fresh = table.inputs[covered:]
        if previous is not None and not fresh and self._all_end():
            self._ahead = None  # a step after every row's last token would be wasted
            return self._read(previous, fed=False)
        inputs = mx.array(fresh, dtype=mx.uint32)
        if previous is not None:
            inputs = mx.concatenate([previous.tokens.astype(mx.uint32), inputs])
        with table.adapted():
            logits = self.model(inputs[:, None], cache=table.cache)[:, -1, :]
        tokens = sample_unseen(self._process(None, logits), [row.sampler for row in table.rows])
        mx.async_eval(tokens)
        appended(table.orders, 1)
        for row, token in zip(table.rows[covered:], fresh, strict=True):
            row.fed.append(token)
        self._ahead = Ahead(len(table.rows), tokens)
        if previous is None:
            return [(row, []) for row in table.rows]
        return self._read(previous, fed=True)

    def _all_end(self) -> bool:
        """Whether every row's next token is its max_tokens-th (a stop is not known yet)."""
        return all(row.completion_tokens + 1 >= row.max_tokens for row in self._table.rows)

    def _read(self, ahead: Ahead, fed: bool) -> list[tuple[Sequence, list[Produced]]]:
        """Waits for a queued step's tokens; `fed`: a step queued since already feeds them
        (so they are in the KV cache), else they are the rows' next inputs."""
        table = self._table
        values = ahead.tokens.tolist()
        out: list[tuple[Sequence, list[Produced]]] = []
        for i, row in enumerate(table.rows):
            if i >= ahead.rows:
                out.append((row, []))  # joined after it was queued: its token comes next
                continue
            if fed:
                row.fed.append(values[i])
            else:
                table.inputs[i] = values[i]
            out.append((row, [(values[i], None)]))
        return out

    def _process(self, inputs: mx.array | None, logits: mx.array) -> mx.array:
        """Penalties, logit_bias and grammars: per row, only for rows that have them. Rows
        with a context see their tokens so far, `inputs` added (a pipelined step has only
        rows whose processors read none, and passes None)."""
        table = self._table
        if not any(row.processors for row in table.rows):
            return logits
        rows = []
        for i, (row, context) in enumerate(zip(table.rows, table.contexts, strict=True)):
            logits_i = logits[i : i + 1]
            seen = None if context is None else context.update_and_fetch(inputs[i : i + 1])
            for process in row.processors:
                logits_i = process(seen, logits_i)
            rows.append(logits_i)
        return mx.concatenate(rows, axis=0)

    def keep(self, indices: list[int]) -> None:
        """Drops every row not in `indices`, with its KV memory."""
        if len(indices) == len(self._table.rows):
            return
        self._keep_ahead(indices)
        self._table.keep(indices)

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
        return self._table.extract(index, leaving)
