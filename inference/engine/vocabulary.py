"""A chat model's tokenizer and what follows from it, without its weights: what serving needs
to render, tokenize and check a prompt, and to compile its grammar, on its own threads.

Serving's copy is its own tokenizer instance, used under one lock: a Hugging Face tokenizer
borrows itself mutably while it encodes (truncation and padding settings), so sharing the
engine thread's instance would fail one of them ("Already borrowed"). The engine's instance
is a copy of serving's (tokenizer_copy): a copy takes a quarter of a read, and the first
request waits for both."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from inference.engine.types import EngineError, ErrorKind, ModelSpec

DEFAULT_CONTEXT = 4096


def context_length_of(spec: ModelSpec, config: dict) -> int:
    """The catalog's context length, else the model's (a vision model's text config's), never
    past what the engine serves exactly (Llama 4: its first attention chunk)."""
    limit = chunk_context_limit(config) or float("inf")
    if spec.context_length:
        return int(min(spec.context_length, limit))
    for _, positions in position_fields(config):
        return int(min(positions, limit))
    return int(min(DEFAULT_CONTEXT, limit))


def position_fields(config: dict) -> Iterator[tuple[dict, int]]:
    """Where a config names its trained context, in the order it is read: each integer field
    (`max_position_embeddings`, then its older names) of the config, then of its text config
    (a vision model's), with the dict it is in (the catalog reads its RoPE scaling there)."""
    text_config = config.get("text_config") or {}
    for source in (config, text_config):
        for key in ("max_position_embeddings", "max_sequence_length", "n_positions"):
            if isinstance(source.get(key), int):
                yield source, source[key]


def chunk_context_limit(config: dict) -> int | None:
    """The longest context a chunked-attention model (Llama 4) is served to, exactly: its first
    attention chunk, below its first query-temperature step (engine/chunked.py); None for
    other models."""
    text = config.get("text_config") or config
    chunk = text.get("attention_chunk_size")
    if config.get("model_type") != "llama4" or not chunk:
        return None
    limit = int(chunk)
    if text.get("attn_temperature_tuning", 4):  # mlx-lm's default: on
        limit = min(limit, int(text.get("floor_scale", 8192)) - 1)
    return limit


class TokenizerFacts:
    """What follows from a chat model's tokenizer (`self.tokenizer`), worked out once: for
    serving's Vocabulary and for the engine's LoadedModel alike."""

    tokenizer: Any

    @cached_property
    def vocab(self) -> dict[str, int]:
        """Token text -> id, built once: the tokenizer builds a fresh dict on every call
        (22 ms for SmolLM2's 49k tokens, on every request's stop tokens)."""
        return self.tokenizer.get_vocab()

    @cached_property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @cached_property
    def marker_tokens(self) -> dict[str, int]:
        from inference.engine.grammar_tokens import added_token_ids

        return added_token_ids(self.tokenizer)

    @cached_property
    def ll_tokenizer(self) -> Any:
        # Built on the first constrained request only: it takes about half a second.
        from inference.engine.constraints import make_ll_tokenizer

        return make_ll_tokenizer(self.tokenizer)


@dataclass
class Vocabulary(TokenizerFacts):
    spec: ModelSpec
    # mlx-lm's TokenizerWrapper; for an embedding model, its text -> content ids function
    # (engine/embedding/tokens.py: content_encoder); for a reranker, its (query, documents)
    # -> pairs of ids function (engine/rerank/tokens.py: pair_encoder)
    tokenizer: Any
    config: dict
    # Held while the tokenizer is used: see the module's docstring.
    lock: threading.Lock = field(default_factory=threading.Lock)

    @cached_property
    def context_length(self) -> int:
        return context_length_of(self.spec, self.config)


def _read(spec: ModelSpec) -> Vocabulary:
    from mlx_lm.utils import _download, load_tokenizer

    files = spec.base or spec  # an adapter's tokenizer and config are its base's
    if files.from_hub:  # what mlx-lm's load would fetch first: the users' machines have internet
        path = _download(files.location)
    else:
        path = Path(files.location)
        if not (path / "config.json").is_file():
            raise EngineError(
                ErrorKind.MODEL_UNAVAILABLE,
                f"model '{spec.model_id}' could not be loaded: its weights are missing on disk",
            )
    config = json.loads((Path(path) / "config.json").read_text())
    if spec.purpose == "embedding":
        from inference.engine.embedding.tokens import content_encoder

        return Vocabulary(spec, content_encoder(Path(path)), config)
    if spec.purpose == "rerank":
        from inference.engine.rerank.tokens import pair_encoder

        return Vocabulary(spec, pair_encoder(Path(path)), config)
    text_config = config.get("text_config") or {}
    eos = config.get("eos_token_id", text_config.get("eos_token_id"))
    return Vocabulary(spec, load_tokenizer(Path(path), eos_token_ids=eos), config)


class Vocabularies:
    """One Vocabulary per model files, read on first use by whichever thread asks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple, Vocabulary] = {}
        self._reading: dict[tuple, threading.Lock] = {}

    def get(self, spec: ModelSpec) -> Vocabulary:
        files = spec.base or spec  # an adapter reads its base's tokenizer
        key = (files.location, files.from_hub, spec.context_length, _changed_at(files))
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                return entry
            reading = self._reading.setdefault(key, threading.Lock())
        with reading:  # one read per model, however many requests wait for it
            with self._lock:
                entry = self._entries.get(key)
            if entry is None:
                entry = _read(spec)
                with self._lock:
                    self._entries[key] = entry
        return entry


def _changed_at(spec: ModelSpec) -> float:
    """When a local model's files last changed (a re-import reads them again); 0 otherwise."""
    if spec.from_hub:
        return 0.0
    try:
        return (Path(spec.location) / "config.json").stat().st_mtime
    except OSError:
        return 0.0


vocabularies = Vocabularies()


def tokenizer_copy(spec: ModelSpec) -> Any:
    """A chat model's tokenizer as an instance of its own, for the engine: a copy of the one
    serving reads (read here first when the engine loads a model no request has named yet,
    a preload's)."""
    vocabulary = vocabularies.get(spec)
    with vocabulary.lock:
        return copy.deepcopy(vocabulary.tokenizer)
