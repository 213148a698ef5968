"""Embedding requests of one loaded model, run a bounded batch per engine step.

Every input becomes a row; rows wait in the order their requests came (a request's own rows
shortest first, so one batch pads little), an interactive request's ahead of every
batch-priority one's (engine/scheduling.py: batch work runs in what interactive work leaves).
A step runs at most one forward pass of at most `prefill_step` padded tokens, so chat models'
decoding on the same engine thread never waits more than one such pass. A request is answered
when its last row is done.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np

from inference.engine.config import EngineConfig
from inference.engine.embedding.load import EmbeddingModel
from inference.engine.embedding.pooling import l2_normalize, pool
from inference.engine.embedding.tokens import EmbeddingTokenizer
from inference.engine.pool import LoadedModel
from inference.engine.types import BATCH, Embedded, EmbeddingJob, EngineError, ErrorKind

RATE_WINDOW = 10.0  # seconds of steps behind tokens/s
PAD_SLACK = 1.25  # padded tokens a batch may run per real token


@dataclass(eq=False)
class Pending:
    """One request in the runner: its rows' ids, and the vectors found so far."""

    job: EmbeddingJob
    ids: list[list[int]]
    vectors: list[np.ndarray | None] = field(default_factory=list)
    left: int = 0

    @property
    def tokens(self) -> int:
        return sum(len(ids) for ids in self.ids)


class EmbeddingRunner:
    """Engine thread only; the same small face as ModelRunner for worker.py (busy, sequences,
    waiting, add, step, cancel, close, tokens_per_second, prefix_cache_bytes)."""

    prefix_cache_bytes = 0
    input_param = "input"  # the request field its inputs came in, named in errors

    def __init__(self, loaded: LoadedModel, config: EngineConfig) -> None:
        self.loaded = loaded
        self.model: EmbeddingModel = loaded.model
        self.tokenizer: EmbeddingTokenizer = loaded.tokenizer
        self.config = config
        self.budget = max(1, config.prefill_step)
        self.pooling = self._pooling(loaded.spec.pooling)
        self._pending: list[Pending] = []
        self._rows: deque[tuple[Pending, int]] = deque()  # (request, input index) to run
        self._recent: deque[tuple[float, int]] = deque()

    def _pooling(self, asked: str) -> str:
        return self.model.default_pooling if asked == "auto" else asked

    @property
    def busy(self) -> bool:
        return bool(self._rows)

    @property
    def sequences(self) -> list[Pending]:
        return list(self._pending)

    @property
    def waiting(self) -> int:
        return 0  # every admitted request is being worked on, a batch at a time

    def tokens_per_second(self) -> float:
        now = time.monotonic()
        return sum(n for t, n in self._recent if t >= now - RATE_WINDOW) / RATE_WINDOW

    def add(self, job: EmbeddingJob) -> None:
        """Tokenizes and checks the job's inputs; raises EngineError for a bad one."""
        ids = [self._tokens(job, index, item) for index, item in enumerate(job.inputs)]
        pending = Pending(job, ids, [None] * len(ids), len(ids))
        limit = self.config.max_request_prompt_tokens
        if limit and pending.tokens > limit:
            raise EngineError(
                ErrorKind.PROMPT_TOO_LARGE,
                f"This request's inputs take {pending.tokens} tokens; this server reads at most "
                f"{limit} for one request",
                param=self.input_param,
            )
        self._pending.append(pending)
        self.loaded.active += 1
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        rows = [(pending, i) for i in order]
        later = [row for row in self._rows if row[0].job.priority == BATCH]
        if job.priority == BATCH or not later:
            self._rows.extend(rows)
        else:  # before the batch rows waiting: the batch step running now is not cut
            sooner = [row for row in self._rows if row[0].job.priority != BATCH]
            self._rows = deque([*sooner, *rows, *later])

    def _tokens(self, job: EmbeddingJob, index: int, item: str | tuple[int, ...]) -> list[int]:
        if isinstance(item, str):
            content = self.tokenizer.content(item)
        else:
            content = list(item)
            check_vocabulary(content, index, self.loaded.config.get("vocab_size"))
        prefix, suffix = self.tokenizer.specials(self.pooling == "last")
        limit = min(job.max_tokens or self.loaded.context_length, self.loaded.context_length)
        length = len(prefix) + len(content) + len(suffix)
        if length > limit:
            if not job.truncate:
                raise EngineError(
                    ErrorKind.CONTEXT_LENGTH_EXCEEDED,
                    f"input[{index}] is {length} tokens long; this model embeds at most "
                    f"{limit} tokens per input.",
                    param="input",
                )
            # Cut the content, keep the specials: BERT's [SEP], a decoder's final EOS.
            content = content[: max(0, limit - len(prefix) - len(suffix))]
        return [*prefix, *content, *suffix][:limit]

    def step(self) -> list[tuple[Pending, list[Embedded]]]:
        """Runs one batch; returns the requests it finished, each with its answer."""
        batch = self._take()
        if not batch:
            return []
        vectors = self._forward([pending.ids[i] for pending, i in batch])
        finished = []
        for (pending, index), vector in zip(batch, vectors, strict=True):
            pending.vectors[index] = vector
            pending.left -= 1
            if pending.left == 0:
                finished.append((pending, [Embedded(list(pending.vectors), pending.tokens)]))
                self._forget(pending)
        return finished

    def _take(self) -> list[tuple[Pending, int]]:
        """The next rows in order, as many as fit the budget padded to the longest, and no
        more once padding would waste over a quarter of the batch: on a CPU the forward pass
        costs about the same per token, pad or not, so a batch of mixed lengths is slower."""
        batch: list[tuple[Pending, int]] = []
        longest = real = 0
        while self._rows:
            pending, index = self._rows[0]
            size = len(pending.ids[index])
            length = max(longest, size)
            padded = length * (len(batch) + 1)
            if batch and (padded > self.budget or padded > PAD_SLACK * (real + size)):
                break
            batch.append(self._rows.popleft())
            longest, real = length, real + size
        return batch

    def _forward(self, rows: list[list[int]]) -> np.ndarray:
        longest = max(len(r) for r in rows)
        # Right padding with id 0: encoders mask the pads, decoders' causal mask keeps real
        # tokens from seeing them, and pooling reads only real positions.
        padded = np.zeros((len(rows), longest), dtype=np.int32)
        for i, row in enumerate(rows):
            padded[i, : len(row)] = row
        lengths = mx.array([len(r) for r in rows], dtype=mx.int32)
        mask = (mx.arange(longest)[None, :] < lengths[:, None]).astype(mx.float32)
        vectors = self._vectors(mx.array(padded), mask, lengths)
        mx.eval(vectors)
        self._recent.append((time.monotonic(), sum(len(r) for r in rows)))
        while self._recent and self._recent[0][0] < time.monotonic() - RATE_WINDOW:
            self._recent.popleft()
        return np.array(vectors, dtype=np.float32)

    def _vectors(self, ids: mx.array, mask: mx.array, lengths: mx.array) -> mx.array:
        vectors = pool(self.model.hidden(ids, mask), lengths, self.pooling)
        return l2_normalize(vectors) if self.loaded.spec.normalize else vectors

    def cancel(self, pendings: list[Pending]) -> None:
        for pending in pendings:
            self._forget(pending)

    def _forget(self, pending: Pending) -> None:
        if pending in self._pending:
            self._pending.remove(pending)
            self.loaded.active -= 1
            self._rows = deque(row for row in self._rows if row[0] is not pending)

    def close(self) -> None:
        self.cancel(self.sequences)


def check_vocabulary(ids: list[int], index: int, vocab_size: int | None) -> None:
    for token in ids:
        if token < 0 or (vocab_size is not None and token >= vocab_size):
            top = f" (0 to {vocab_size - 1})" if vocab_size else ""
            raise EngineError(
                ErrorKind.INVALID_REQUEST,
                f"input[{index}] has token id {token}, outside the model's vocabulary{top}.",
                param="input",
            )
