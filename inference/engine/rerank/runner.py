"""Reranking requests of one loaded reranker: the embedding runner's queue, batching and
answers (a bounded padded batch per engine step, shortest pairs first), with a score where an
embedding has a vector. Each job input is a whole pair as serving built it (engine/rerank/
tokens.py), its model's markers included; each answer vector holds the pair's one score."""

from __future__ import annotations

import mlx.core as mx

from inference.engine.embedding.runner import EmbeddingRunner
from inference.engine.types import EmbeddingJob, EngineError, ErrorKind


class RerankRunner(EmbeddingRunner):
    input_param = "documents"

    def _pooling(self, asked: str) -> str:
        return ""  # a reranker scores the pair itself

    def _tokens(self, job: EmbeddingJob, index: int, item: str | tuple[int, ...]) -> list[int]:
        if isinstance(item, str):  # serving always sends ids: a bug, not a client's error
            raise EngineError(ErrorKind.INTERNAL, "a rerank job needs token ids")
        limit = self.loaded.context_length
        if len(item) > limit:
            raise EngineError(
                ErrorKind.CONTEXT_LENGTH_EXCEEDED,
                f"documents[{index}] with the query is {len(item)} tokens long; this model "
                f"reads at most {limit}.",
                param="documents",
            )
        return list(item)

    def _vectors(self, ids: mx.array, mask: mx.array, lengths: mx.array) -> mx.array:
        return self.model.scores(ids, mask, lengths)[:, None]
