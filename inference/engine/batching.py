"""Continuous batching for one loaded model: who waits, whose prompt is read, who decodes.

A sequence goes waiting -> prefill -> decode. Each engine step admits waiting sequences by fair
share (scheduling.admit), reads a paced share of the waiting prompts (prefill.PrefillBatch),
and decodes one token for every sequence past its prompt (decode.DecodeBatch). mlx-lm's KV cache
classes, model code and LRUPromptCache are used as they are; its BatchGenerator is not (its
prefill read every waiting prompt's next 512-token chunk in one step, and it sampled row by
row).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import mlx.core as mx

from inference.engine.config import EngineConfig
from inference.engine.copies import Copies
from inference.engine.decode import DecodeBatch
from inference.engine.kv import KVFormat
from inference.engine.pool import LoadedModel
from inference.engine.prefill import PrefillBatch
from inference.engine.prefixes import PrefixCache
from inference.engine.runner_prefixes import PrefixKeeper
from inference.engine.scheduling import BatchLimits, PrefillPacer, admit, to_set_aside, used
from inference.engine.sequence import Sequence
from inference.engine.speculative import SpeculationStats
from inference.engine.token_rate import TokenRate
from inference.engine.types import Event

log = logging.getLogger(__name__)


class Rates(dict[str, TokenRate]):
    """Decode rates by model id: a base's rows' and each of its adapters'."""

    def count(self, produced: list[tuple[Sequence, list]]) -> None:
        counts: dict[str, int] = {}
        for sequence, tokens in produced:
            model_id = sequence.loaded.spec.model_id
            counts[model_id] = counts.get(model_id, 0) + len(tokens)
        for model_id, n in counts.items():
            self.setdefault(model_id, TokenRate()).count(n)

    def per_second(self, model_id: str | None = None) -> float:
        if model_id is None:
            return sum(rate.per_second() for rate in self.values())
        rate = self.get(model_id)
        return rate.per_second() if rate is not None else 0.0


class ModelRunner:
    """Engine thread only. Sequences join between steps; finished ones leave at once. What
    goes to and comes from the prefix cache is its keeper's (runner_prefixes.PrefixKeeper),
    the decode rate its counter's (token_rate.TokenRate). A base model's runner serves its
    LoRA adapters' rows too, in the same batches (lora.py): each row's `loaded` is its own
    model, base or adapter."""

    def __init__(self, loaded: LoadedModel, config: EngineConfig) -> None:
        self.loaded = loaded
        self.config = config
        self._waiting: list[Sequence] = []
        self.kv = KVFormat.of(loaded)  # the same on every rank of a group: spec and format
        self._prefill = PrefillBatch(loaded.model, self.kv.make, loaded.lora)
        self._decode = DecodeBatch(loaded.model, loaded.lora)
        self._pacer = PrefillPacer(config.prefill_share)
        self._limits = BatchLimits.of(config.max_batch, config.batch_share, config.batch_beside)
        self._prefix_hits: dict[int, tuple[Any, list[int]]] = {}  # id(sequence) -> (cache, rest)
        self._copies = Copies()
        self._prefixes = PrefixCache.of(loaded, config)
        self._keeper = PrefixKeeper(
            self._prefixes, self._prefill, self._decode, self._prefix_hits, config
        )
        self._rates = Rates()

    @property
    def busy(self) -> bool:
        rows = self._prefill.rows or self._decode.rows
        return bool(self._waiting or rows or self._keeper.pending)

    @property
    def sequences(self) -> list[Sequence]:
        return [*self._waiting, *self._copies.waiting, *self._prefill.rows, *self._decode.rows]

    @property
    def waiting(self) -> int:
        """Sequences not yet given a place in the batch (reading or decoding)."""
        return len(self._waiting) + len(self._copies.waiting)

    @property
    def pacing(self) -> tuple[float, float]:
        """What the prefill budget comes from; a group's followers take their leader's."""
        return self._pacer.tokens_per_second, self._pacer.step_seconds

    @pacing.setter
    def pacing(self, value: tuple[float, float]) -> None:
        self._pacer.tokens_per_second, self._pacer.step_seconds = value

    @property
    def prefix_cache_bytes(self) -> int:
        return self._prefixes.nbytes if self._prefixes else 0

    @property
    def prefixes(self) -> PrefixCache | None:
        return self._prefixes

    def prefixes_of(self, model_id: str) -> PrefixCache | None:
        """The prefix cache of the model or one of its adapters (lora.py), if any yet."""
        return self._keeper.named(model_id)

    @property
    def speculation(self) -> SpeculationStats:
        """Draft tokens fed and accepted by this model's speculating sequences."""
        return self._decode.stats

    def add(self, sequence: Sequence) -> None:
        sequence.loaded.active += 1  # its adapter's, for an adapter's row: kept loaded
        self._enqueue(sequence)

    def _enqueue(self, sequence: Sequence) -> None:
        self._settle()  # a follow-up turn finds the conversation just answered
        if self._copies.follow(sequence):
            sequence.cached_tokens = len(sequence.prompt) - 1  # read once, for its leader
            return
        prefixes = self._keeper.of(sequence)  # its adapter's, never another's
        if sequence.embeddings is not None or prefixes is None:
            cache, rest = None, sequence.prompt  # images: same tokens, other pictures
        else:
            cache, rest = prefixes.fetch(
                sequence.prompt, id(sequence), lambda n: self._keeper.copy_of(sequence, n)
            )
        sequence.cached_tokens = len(sequence.prompt) - len(rest)
        self._prefix_hits[id(sequence)] = (cache, rest)
        self._waiting.append(sequence)

    def step(self) -> list[tuple[Sequence, list[Event]]]:
        """Admits, reads a paced share of waiting prompts, decodes one token per stream."""
        self._settle()
        self._limits.tick(self.sequences)
        self._admit()
        waited = 0.0
        if self._prefill.rows:
            # The queued decode step (decode.PIPELINE) finishes first, and counts as decoding:
            # the pacer weighs reading against decoding by their times.
            started = time.perf_counter()
            self._decode.wait()
            waited = time.perf_counter() - started
            self._read_prompts()
        if not self._decode.rows:
            return []
        started = time.perf_counter()
        produced = self._decode.step()
        self._pacer.decoded(waited + time.perf_counter() - started)
        self._rates.count(produced)
        return self._deliver(produced)

    def _admit(self) -> None:
        if not self._waiting:
            return
        self._make_room()
        running = self._prefill.rows + self._decode.rows
        free = self.config.max_batch - used(running, self._limits)
        chosen = admit(self._waiting, running, max(0, free), self._limits, self._prefill.rows)
        for sequence in chosen:
            self._waiting.remove(sequence)
            cache, rest = self._prefix_hits.pop(id(sequence))
            self._prefill.add(sequence, cache, rest)
        self._graduate()

    def _make_room(self) -> None:
        """Sets aside prompts still being read (their caches so far kept: nothing is read
        twice): batch ones for interactive work, and those of requests above their share
        while one below it waits without room (scheduling.to_set_aside). Decoding sequences
        are never interrupted."""
        capacity = self.config.max_batch
        running = self._prefill.rows + self._decode.rows
        while True:
            victim = to_set_aside(
                self._waiting, running, self._prefill.rows, capacity, self._limits
            )
            if victim is None:
                return
            sequence, cache, rest = self._prefill.set_aside(victim)
            self._prefix_hits[id(sequence)] = (cache, rest)
            self._waiting.insert(0, sequence)
            running = self._prefill.rows + self._decode.rows

    def _read_prompts(self) -> None:
        rows, step = self._prefill.rows, self.config.prefill_step
        budget = self._pacer.budget_for(rows, self._decode.rows, step)
        started = time.perf_counter()
        read = self._prefill.step(budget)
        self._pacer.read(read, time.perf_counter() - started)
        mx.clear_cache()
        self._graduate()

    def _graduate(self) -> None:
        """Rows with only their prompt's last token left move to the decode batch; copies
        of their prompts queue with their cache (merging copies it for each)."""
        ready = self._prefill.ready()
        if not ready:
            return
        for index in ready:
            leader = self._prefill.rows[index]
            self._keeper.snapshot(leader, self._prefill.cache_of(index))
            for copy in reversed(self._copies.release(leader)):
                self._prefix_hits[id(copy)] = (self._prefill.cache_of(index), copy.prompt[-1:])
                self._waiting.insert(0, copy)
        rows, cache = self._prefill.take(ready)
        self._decode.join(rows, cache, [row.prompt[-1] for row in rows])

    def _deliver(self, produced) -> list[tuple[Sequence, list[Event]]]:
        # Cancelled rows never get here: the engine drops them (cancel) before each step.
        out, keep = [], []
        for index, (sequence, tokens) in enumerate(produced):
            events: list[Event] = []
            for token, logprobs in tokens:  # several when a draft was accepted
                last = sequence.completion_tokens + 1 >= sequence.max_tokens
                events.extend(sequence.on_token(token, logprobs, last))
                if sequence.finished:  # a stop or max_tokens: the rest is not the answer's
                    break
            out.append((sequence, events))
            if sequence.finished:
                prefixes = self._keeper.of(sequence)
                if prefixes is not None:
                    prefixes.forget(id(sequence))
                    if sequence.embeddings is None:
                        cache = self._decode.extract(index, leaving=True)
                        self._keeper.finish(sequence, cache)
                self._release(sequence)
            else:
                keep.append(index)
        self._decode.keep(keep)
        return out

    def _settle(self) -> None:
        # Named here as well: tests settle a runner's finished sequences between steps.
        self._keeper.settle()

    def tokens_per_second(self, model_id: str | None = None) -> float:
        """The decode rate of every row, or of the rows of the model or one of its adapters."""
        return self._rates.per_second(model_id)

    def drop_adapter(self, model_id: str) -> None:
        """An adapter of the model unloaded: its rows leave the batches (the pool told their
        requests), and its prefix cache goes."""
        self.cancel([s for s in self.sequences if s.adapter == model_id], keep_prompts=False)
        self._keeper.drop(model_id)

    def cancel(self, sequences: list[Sequence], keep_prompts: bool = True) -> None:
        """Drops the sequences wherever they are now; their KV memory goes with them, but for
        what the prefix cache expects of them (a prompt read, an entry handed over), kept
        unless not `keep_prompts` (the runner closes)."""
        gone = {id(s) for s in sequences}
        present = [s for s in self.sequences if id(s) in gone]
        for sequence in sequences:
            prefixes = self._keeper.of(sequence)
            if prefixes is None:
                continue
            if keep_prompts:
                prefixes.realize(id(sequence), to_disk=True)  # and forgets it
            else:
                prefixes.forget(id(sequence))
        self._copies.forget(gone)
        for leader in sequences:  # its copies, if still wanted, queue on their own
            for copy in self._copies.release(leader):
                self._enqueue(copy)
        waiting = [s for s in self._waiting if id(s) in gone]
        for sequence in waiting:
            self._waiting.remove(sequence)
            self._prefix_hits.pop(id(sequence), None)
        in_prefill = [i for i, s in enumerate(self._prefill.rows) if id(s) in gone]
        if in_prefill:
            self._prefill.drop(in_prefill)
        keep = [i for i, s in enumerate(self._decode.rows) if id(s) not in gone]
        self._decode.keep(keep)
        for sequence in present:
            self._release(sequence)

    def _release(self, sequence: Sequence) -> None:
        # Idle time counts from the last sequence's end, not from when it started.
        sequence.loaded.active -= 1
        sequence.loaded.last_used = time.monotonic()

    def close(self) -> None:
        """Drops every sequence; with a disk tier, what the prefix cache has or expects of
        them is kept there first (prompts read just before a stop or an eviction)."""
        if self._prefixes is not None:
            self._settle()
        keep = self._prefixes is not None and self._prefixes.disk is not None
        self.cancel(self.sequences, keep_prompts=keep)
