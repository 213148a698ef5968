"""Prompts being read into their KV caches, a bounded number of tokens per engine step.

Replaces mlx-lm's PromptProcessingBatch, which read up to prefill_batch x prefill_step tokens in
one step (16k with our settings: minutes on a 2-core CPU, during which no stream moved and no
cancellation landed). Here the scheduler gives each step a token budget, split evenly between
the requests with prompts to read (least recently served first), and within a request given to
its prompts in order. Each prompt keeps its own cache between steps, so a request can be served
or passed over, and a prompt set aside, without touching anyone else's; the prompts read in one
step go through the model together (their caches merged for the pass, then split again). Only
the layers run: the lm_head's logits over prompt positions are never needed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import make_prompt_cache

from inference.engine.kv import batch_of_one, reserve
from inference.engine.scheduling import MIN_CHUNK, group_of
from inference.engine.sequence import Sequence

# The answer's positions a prompt's KV is given room for from its first chunk, at most.
ANSWER_ROOM = 256


def merge(caches: list[list[Any]]) -> list[Any]:
    """Single-sequence caches (one list of layers each) into one batched cache per layer."""
    if len(caches) == 1:  # an agent's turn, alone: no copy of its (long) cache
        return [batch_of_one(layer) for layer in caches[0]]
    return [type(layers[0]).merge(list(layers)) for layers in zip(*caches, strict=True)]


def padded(embeddings: list[mx.array], length: int) -> mx.array:
    """Rows of (n, hidden) embeddings, right-padded with zeros to `length`, as one batch."""
    rows = [
        e if e.shape[0] == length else mx.pad(e, [(0, length - e.shape[0]), (0, 0)])
        for e in embeddings
    ]
    return mx.stack(rows)


@dataclass
class Reading:
    sequence: Sequence
    cache: list[Any]  # the sequence's own cache, one entry per layer
    todo: list[int]  # prompt tokens still to read (never the last: decoding feeds it)
    start: int = 0  # the prompt position of todo[0]

    def take_chunk(self, n: int) -> list[int]:
        chunk, self.todo = self.todo[:n], self.todo[n:]
        self.start += len(chunk)
        return chunk


class PrefillBatch:
    def __init__(
        self, model: nn.Module, make_cache: Callable[[], list[Any]] | None = None, lora: Any = None
    ) -> None:
        self.model = model
        self.lora = lora  # lora.LoRASet: the model's adapters, whose rows read here too
        # A new prompt's empty cache, in the model's KV format (engine/kv.py).
        self._make_cache = make_cache or (lambda: make_prompt_cache(model))
        self._readings: list[Reading] = []
        self._served: dict[str, int] = {}  # group -> the step it was last served
        self._steps = 0

    @property
    def rows(self) -> list[Sequence]:
        return [r.sequence for r in self._readings]

    def __len__(self) -> int:
        return len(self._readings)

    def add(self, sequence: Sequence, cache: list[Any] | None, rest: list[int]) -> None:
        """`rest`: the prompt's tokens past what `cache` (a prefix-cache hit) already holds."""
        cache = cache if cache is not None else self._make_cache()
        reserve(cache, len(sequence.prompt) + min(sequence.max_tokens, ANSWER_ROOM))
        start = len(sequence.prompt) - len(rest)
        self._readings.append(Reading(sequence, cache, list(rest[:-1]), start))

    def step(self, budget: int) -> int:
        """Reads about `budget` prompt tokens; returns the tokens the pass computed."""
        chunks = self._plan(budget)
        if not chunks:
            return 0
        computed = 0
        # Prompts with images are read from their input embeddings, in a pass of their own.
        for embedded in (False, True):
            group = [(i, n) for i, n in chunks if self._embedded(i) == embedded]
            if group:
                computed += self._read(group, embedded)
        return computed

    def _embedded(self, index: int) -> bool:
        return self._readings[index].sequence.embeddings is not None

    def _read(self, chunks: list[tuple[int, int]], embedded: bool) -> int:
        readings = [self._readings[i] for i, _ in chunks]
        starts = [r.start for r in readings]
        tokens = [r.take_chunk(n) for r, (_, n) in zip(readings, chunks, strict=True)]
        embeddings = None
        if embedded:
            embeddings = [
                r.sequence.embeddings[s : s + len(t)]
                for r, s, t in zip(readings, starts, tokens, strict=True)
            ]
        wanted = any(r.sequence.drafter is not None and r.sequence.drafter.target for r in readings)
        lora = self.lora
        adapted = lora.rows([r.sequence.adapter for r in readings]) if lora else nullcontext()
        with adapted:  # each row's adapter, if any, in the adapted linears (lora.py)
            if len(readings) == 1:
                hidden = self._forward(readings[0].cache, tokens, embeddings, wanted)
            else:
                cache = merge([r.cache for r in readings])
                hidden = self._forward(cache, tokens, embeddings, wanted)
                for i, reading in enumerate(readings):
                    reading.cache = [layer.extract(i) for layer in cache]
        if hidden is not None:
            self._hand_hidden(readings, starts, tokens, hidden)
        return len(tokens) * max(len(t) for t in tokens)

    @staticmethod
    def _hand_hidden(
        readings: list[Reading], starts: list[int], chunks: list[list[int]], hidden: mx.array
    ) -> None:
        """Each MTP row's hidden states of its chunk, with the prompt tokens that follow them
        (the chunk never holds the prompt's last token, so each has one)."""
        for i, (reading, start, chunk) in enumerate(zip(readings, starts, chunks, strict=True)):
            drafter = reading.sequence.drafter
            if drafter is not None and drafter.target is not None:
                following = reading.sequence.prompt[start + 1 : start + 1 + len(chunk)]
                drafter.read(hidden[i, : len(chunk)], following)

    def _plan(self, budget: int) -> list[tuple[int, int]]:
        """(reading index, tokens) for this step: the budget split between requests."""
        groups: OrderedDict[str, list[int]] = OrderedDict()
        for i, reading in enumerate(self._readings):
            if reading.todo:
                groups.setdefault(group_of(reading.sequence), []).append(i)
        if not groups:
            return []
        order = sorted(groups, key=lambda g: self._served.get(g, -1))
        served = order[: max(1, min(len(order), budget // MIN_CHUNK))]
        share = max(1, budget // len(served))
        self._steps += 1
        plan = []
        for group in served:
            self._served[group] = self._steps
            left = share
            for i in groups[group]:
                n = min(left, len(self._readings[i].todo))
                plan.append((i, n))
                left -= n
                if left <= 0:
                    break
        return plan

    def _forward(
        self,
        cache: list[Any],
        chunks: list[list[int]],
        embeddings: list[mx.array] | None,
        wanted: bool = False,
    ) -> mx.array | None:
        """Reads the chunks into the cache; their final hidden states when `wanted` (an MTP
        row reads them), evaluated with the cache."""
        lengths = [len(c) for c in chunks]
        longest = max(lengths)
        padding = [longest - n for n in lengths]
        if max(padding):
            for layer in cache:
                layer.prepare(lengths=lengths, right_padding=padding)
        tokens = mx.array([c + [0] * (longest - len(c)) for c in chunks], dtype=mx.uint32)
        hidden = None
        if embeddings is not None:
            self.model.read_embeddings(tokens, padded(embeddings, longest), cache)
        else:
            layers = getattr(self.model, "model", None)
            hidden = (layers if isinstance(layers, nn.Module) else self.model)(tokens, cache=cache)
        if max(padding):
            for layer in cache:
                layer.finalize()
        if not wanted:
            hidden = None
        mx.eval([layer.state for layer in cache] + ([] if hidden is None else [hidden]))
        return hidden

    def cache_of(self, index: int) -> list[Any]:
        """Reading `index`'s cache (shared, not copied: batching a cache copies it)."""
        return self._readings[index].cache

    def cache_for(self, sequence: Sequence) -> list[Any] | None:
        """The cache of `sequence`'s reading, if it is one of them (shared, not copied)."""
        return next((r.cache for r in self._readings if r.sequence is sequence), None)

    def ready(self) -> list[int]:
        return [i for i, r in enumerate(self._readings) if not r.todo]

    def take(self, indices: list[int]) -> tuple[list[Sequence], list[Any]]:
        """Removes readings `indices`; returns their sequences and one batched cache."""
        chosen = [self._readings[i] for i in indices]
        self.drop(indices)
        return [r.sequence for r in chosen], merge([r.cache for r in chosen])

    def set_aside(self, index: int) -> tuple[Sequence, list[Any], list[int]]:
        """Removes one reading, returning what resumes it later: its sequence, its cache so
        far, and the prompt tokens past that cache (the last one included)."""
        reading = self._readings[index]
        self.drop([index])
        return reading.sequence, reading.cache, [*reading.todo, reading.sequence.prompt[-1]]

    def drop(self, indices: list[int]) -> None:
        gone = set(indices)
        self._readings = [r for i, r in enumerate(self._readings) if i not in gone]
        live = {group_of(r.sequence) for r in self._readings}
        self._served = {g: s for g, s in self._served.items() if g in live}
