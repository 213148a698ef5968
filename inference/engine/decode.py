"""The decode batch: sequences past their prompt, one token each per step.

Replaces mlx-lm's GenerationBatch (its KV cache classes and model code stay): the whole batch
is sampled in one vectorized call (sampling.sample) instead of one sampler call per row, and
newcomers join with their prompt's last token still to feed, so their first token comes out of
the shared step rather than a forward pass of their own.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import TokenBuffer

from inference.engine.sampling import RowSampler, sample
from inference.engine.sequence import Sequence


class DecodeBatch:
    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.rows: list[Sequence] = []
        self.cache: list[Any] = []  # one batched cache per layer, rows in self.rows' order
        self._inputs: list[int] = []  # the token each row feeds next
        self._contexts: list[TokenBuffer | None] = []  # tokens seen, for logits processors

    def __len__(self) -> int:
        return len(self.rows)

    def join(self, rows: list[Sequence], cache: list[Any], last_tokens: list[int]) -> None:
        """Rows whose prompts are read, all but `last_tokens`, with their batched cache."""
        if not self.rows:
            self.cache = cache
        else:
            for mine, theirs in zip(self.cache, cache, strict=True):
                mine.extend(theirs)
        self.rows.extend(rows)
        self._inputs.extend(last_tokens)
        self._contexts.extend(
            TokenBuffer(row.prompt[:-1]) if row.processors else None for row in rows
        )

    def step(self) -> list[tuple[Sequence, int, mx.array | None]]:
        """Feeds every row its next input; returns (row, sampled token, row's logprobs)."""
        inputs = mx.array(self._inputs, dtype=mx.uint32)
        logits = self.model(inputs[:, None], cache=self.cache)[:, -1, :]
        logits = self._process(inputs, logits)
        samplers: list[RowSampler] = [row.sampler for row in self.rows]
        want = any(row.job.params.logprobs for row in self.rows)
        tokens, logprobs = sample(logits, samplers, want)
        for row, fed in zip(self.rows, self._inputs, strict=True):
            row.fed.append(fed)
        self._inputs = list(tokens)
        return [
            (row, token, None if logprobs is None else logprobs[i])
            for i, (row, token) in enumerate(zip(self.rows, tokens, strict=True))
        ]

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
        self.rows = [self.rows[i] for i in indices]
        self._inputs = [self._inputs[i] for i in indices]
        self._contexts = [self._contexts[i] for i in indices]
        if not indices:
            self.cache = []
            return
        for layer in self.cache:
            layer.filter(indices)

    def extract(self, index: int) -> list[Any]:
        """Row `index`'s cache as a single sequence's (for the prefix cache)."""
        return [layer.extract(index) for layer in self.cache]
