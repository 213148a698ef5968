"""The decode batch's rows (decode.py): each row's sequence, the token it feeds next and what
its step needs of it, in lists kept in the batch's row order, with the batched KV cache whose
rows are in that order too. Rows join once their prompt is read, and leave together."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from inference.engine.kv import single_of
from inference.engine.rewind import state_layers
from inference.engine.sampling import needs_history
from inference.engine.sequence import Sequence
from inference.engine.speculative import Context, TrackRecord, in_order


class RowTable:
    """Engine thread only. Every per-row list has one entry per row of `rows`; join and
    keep change them all at once."""

    def __init__(self, model: nn.Module, lora: Any = None) -> None:
        self.model = model
        self.lora = lora  # lora.LoRASet: the model's adapters, whose rows decode here too
        self.rows: list[Sequence] = []
        self.cache: list[Any] = []  # one batched cache per layer, rows in self.rows' order
        self.inputs: list[int] = []  # the token each row feeds next
        self.contexts: list[Context | None] = []  # tokens seen, for logits processors
        # Whether some layer folds positions into a state (recurrent, convolution): a step
        # that rejects a draft token then replays the kept ones (rewind.py).
        self.replays = False
        # Per row: its positions' token indices in physical order once roll_back moved some
        # (None: in order), so that extract() gives the prefix cache its tokens in order.
        self.orders: list[list[int] | None] = []
        self.records: list[TrackRecord] = []  # per row: how right its drafts have been
        # Per row: the first token of a draft that was not worth its place this step,
        # checked against the token the row then produces (a track record kept for nothing).
        self.shadows: list[int | None] = []
        # The model split into layers and output head while some row's drafter reads its
        # hidden states (an MTP head): steps then hand each such row its own.
        self._target: Any = None
        # Whether the batch has held one row since it began: only then are its arrays that
        # row's own (rows joined, or filtered out, leave views into a shared buffer).
        self._alone = False

    def join(self, rows: list[Sequence], cache: list[Any], last_tokens: list[int]) -> None:
        """Rows whose prompts are read, all but `last_tokens`, with their batched cache."""
        self._alone = not self.rows and len(rows) == 1
        if not self.rows:
            self.cache = cache
        else:
            for mine, theirs in zip(self.cache, cache, strict=True):
                mine.extend(theirs)
        self.rows.extend(rows)
        self.inputs.extend(last_tokens)
        self.orders.extend(None for _ in rows)
        self.records.extend(TrackRecord() for _ in rows)
        self.shadows.extend(None for _ in rows)
        # Only processors that read the tokens seen get them (logit_bias reads none).
        self.contexts.extend(
            Context(row.prompt[:-1]) if needs_history(row.processors) else None for row in rows
        )
        self.replays = bool(state_layers(self.cache))
        self._find_target()

    def _find_target(self) -> None:
        drafters = (row.drafter for row in self.rows if row.drafter is not None)
        self._target = next((d.target for d in drafters if d.target is not None), None)

    def adapted(self) -> AbstractContextManager:
        """Around building a forward of every row: each row's LoRA adapter, if any, in the
        model's adapted linears (lora.LoRASet.rows)."""
        if self.lora is None:
            return nullcontext()
        return self.lora.rows([row.adapter for row in self.rows])

    def forward(self, tokens: mx.array) -> tuple[mx.array, mx.array | None]:
        """(logits, hidden states when some row's drafter reads them) of one forward."""
        with self.adapted():
            if self._target is None:
                return self.model(tokens, cache=self.cache), None
            return self._target(tokens, self.cache)

    def keep(self, indices: list[int]) -> None:
        """Drops every row not in `indices`, with its KV memory."""
        self.rows = [self.rows[i] for i in indices]
        self.inputs = [self.inputs[i] for i in indices]
        self.orders = [self.orders[i] for i in indices]
        self.records = [self.records[i] for i in indices]
        self.shadows = [self.shadows[i] for i in indices]
        self.contexts = [self.contexts[i] for i in indices]
        self._find_target()
        if not indices:
            self.cache = []
            return
        for layer in self.cache:
            layer.filter(indices)

    def extract(self, index: int, leaving: bool = False) -> list[Any]:
        """Row `index`'s cache as a single sequence's (for the prefix cache): a copy, or when
        the row `leaving` is the only one the batch ever held, its own arrays handed over
        (kv.single_of), where every layer has that form."""
        if leaving and self._alone and self.orders[0] is None:
            whole = [single_of(layer) for layer in self.cache]
            if all(layer is not None for layer in whole):
                return whole
        layers = [layer.extract(index) for layer in self.cache]
        return in_order(self.cache, layers, self.orders[index])
