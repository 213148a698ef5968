"""Prompts being read into their KV caches, a bounded number of tokens per engine step.

Replaces mlx-lm's PromptProcessingBatch, which read up to prefill_batch x prefill_step tokens in
one step (16k with our settings: minutes on a 2-core CPU, during which no stream moved and no
cancellation landed). Here the scheduler gives each step a token budget; every row reads the
same share of it (right-padded rows cost as much as full ones), and a row leaves for the decode
batch as soon as only its prompt's last token is left. Only the layers run: the lm_head's
logits of prompt positions are never needed (for a 135M model they were 20% of the work).
"""

from __future__ import annotations

import copy
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import make_prompt_cache

from inference.engine.sequence import Sequence


def merge(caches: list[list[Any]]) -> list[Any]:
    """Single-sequence caches (one list of layers each) into one batched cache per layer."""
    return [type(layers[0]).merge(list(layers)) for layers in zip(*caches, strict=True)]


class PrefillBatch:
    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.rows: list[Sequence] = []
        self._todo: list[list[int]] = []  # prompt tokens still to read (never the last one)
        self.cache: list[Any] = []

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, row: Sequence, cache: list[Any] | None, rest: list[int]) -> None:
        """`rest`: the prompt's tokens past what `cache` (a prefix-cache hit) already holds."""
        cache = cache if cache is not None else make_prompt_cache(self.model)
        joined = merge([cache])
        if not self.rows:
            self.cache = joined
        else:
            for mine, theirs in zip(self.cache, joined, strict=True):
                mine.extend(theirs)
        self.rows.append(row)
        self._todo.append(list(rest[:-1]))

    def waiting_tokens(self) -> int:
        return sum(len(t) for t in self._todo)

    def step(self, budget: int) -> int:
        """Reads up to about `budget` tokens, shared evenly between the rows (all of which
        have tokens left: the runner takes ready rows out first). Returns the tokens the
        forward pass computed, padding included."""
        if not self.rows:
            return 0
        share = max(1, budget // len(self.rows))
        chunks = [todo[:share] for todo in self._todo]
        self._todo = [todo[share:] for todo in self._todo]
        self._read(self.cache, chunks)
        return len(chunks) * max(len(c) for c in chunks)

    def _read(self, cache: list[Any], chunks: list[list[int]]) -> None:
        lengths = [len(c) for c in chunks]
        longest = max(lengths)
        padding = [longest - n for n in lengths]
        if max(padding):
            for layer in cache:
                layer.prepare(lengths=lengths, right_padding=padding)
        tokens = mx.array([c + [0] * (longest - len(c)) for c in chunks], dtype=mx.uint32)
        layers = getattr(self.model, "model", None)
        (layers if isinstance(layers, nn.Module) else self.model)(tokens, cache=cache)
        if max(padding):
            for layer in cache:
                layer.finalize()
        mx.eval([layer.state for layer in cache])

    def _split(self, indices: list[int]) -> list[Any]:
        """Takes rows `indices` out (rows and cache); returns their batched cache."""
        chosen = set(indices)
        rest = [i for i in range(len(self.rows)) if i not in chosen]
        taken = [copy.copy(layer) for layer in self.cache]
        for layer in taken:
            layer.filter(indices)
        for layer in self.cache:
            layer.filter(rest)
        self.rows = [self.rows[i] for i in rest]
        self._todo = [self._todo[i] for i in rest]
        return taken

    def ready(self) -> list[int]:
        return [i for i, todo in enumerate(self._todo) if not todo]

    def take(self, indices: list[int]) -> tuple[list[Sequence], list[Any]]:
        """Removes rows `indices` and returns them with their batched cache."""
        rows = [self.rows[i] for i in indices]
        if len(indices) == len(self.rows):
            cache, self.cache = self.cache, []
            self.rows, self._todo = [], []
            return rows, cache
        return rows, self._split(indices)
