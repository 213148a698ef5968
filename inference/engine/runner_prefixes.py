"""What a model's runner (batching.ModelRunner) hands to and takes from its prefix cache: the
KV of prompts just read, copies of running sequences' KV for later lookups, and finished
conversations' KV once their last events are out.

Apart from the runner so that its steps (admit, read, decode, deliver) read without the cache's
bookkeeping; this object owns the finished sequences waiting to be kept, and reads the runner's
batches and prefix hits (never changes them).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

from inference.engine.config import EngineConfig
from inference.engine.decode import DecodeBatch
from inference.engine.kv import grows_only
from inference.engine.prefill import PrefillBatch
from inference.engine.prefixes import PrefixCache, share
from inference.engine.sequence import Sequence


def compact(cache: list, copy_whole: bool = False) -> None:
    """Gives each layer's KV its own buffer, cut to the tokens it holds. What the batch hands
    back are views into the whole batch's preallocated KV: kept as they were, every cached
    prefix pinned a batch-sized buffer while the prefix cache counted only the view (soak:
    RSS +2.6 GB in a minute, against 0.5 GB of weights). A layer handed back `whole` (a
    batch of one's, kv.single_of) owns its buffers and keeps its room to grow, unless
    `copy_whole` (a copy must not share them)."""
    for layer in cache:
        inner = getattr(layer, "caches", None)
        if inner is not None:  # a CacheList, or a packed window's parts (kv_window.py)
            compact(list(inner), copy_whole)
            continue
        if getattr(layer, "whole", False):
            if not copy_whole:
                continue
            layer.whole = False
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if isinstance(keys, mx.array) and isinstance(values, mx.array):
            end = layer.offset
            layer.keys = mx.contiguous(keys[..., :end, :])
            layer.values = mx.contiguous(values[..., :end, :])
            mx.eval(layer.keys, layer.values)
        elif isinstance(keys, tuple) and isinstance(values, tuple):  # (w, scales, biases)
            end = layer.offset
            layer.keys = tuple(mx.contiguous(x[..., :end, :]) for x in keys)
            layer.values = tuple(mx.contiguous(x[..., :end, :]) for x in values)
            mx.eval(layer.keys, layer.values)


def cut(cache: list[Any], length: int) -> None:
    """Cuts a cache that can be cut back to its first `length` tokens."""
    trim_prompt_cache(cache, max(layer.size() for layer in cache) - length)


class PrefixKeeper:
    """Engine thread only, like its runner. `prefixes` is the runner's model's cache; each
    LoRA adapter whose rows the runner serves has its own beside it (`of`), in its memory."""

    def __init__(
        self,
        prefixes: PrefixCache | None,
        prefill: PrefillBatch,
        decode: DecodeBatch,
        hits: dict[int, tuple[Any, list[int]]],
        config: EngineConfig | None = None,
    ) -> None:
        self.prefixes = prefixes
        self._config = config
        self._adapters: dict[str, PrefixCache] = {}  # by the adapter's model id
        self._prefill = prefill
        self._decode = decode
        self._hits = hits  # the runner's: id(sequence) -> (cache, rest) of waiting sequences
        # Finished sequences' caches, kept for the prefix cache once their events are out.
        self._finished: list[tuple[Sequence, list[Any]]] = []

    def of(self, sequence: Sequence) -> PrefixCache | None:
        """The prefix cache of the sequence's model: its adapter's, or the base's."""
        name, base = sequence.adapter, self.prefixes
        if name is None or base is None or self._config is None:
            return base
        cache = self._adapters.get(name)
        if cache is None:
            cache = self._adapters[name] = PrefixCache.of(sequence.loaded, self._config, base)
        return cache

    def named(self, model_id: str) -> PrefixCache | None:
        """The cache kept for `model_id` (the base's or an adapter's), if any yet."""
        base = self.prefixes
        if base is not None and base.model_id == model_id:
            return base
        return self._adapters.get(model_id)

    def drop(self, model_id: str) -> None:
        """An adapter unloaded: its entries leave memory (its finished rows' are never kept)."""
        self._finished = [(s, c) for s, c in self._finished if s.adapter != model_id]
        cache = self._adapters.pop(model_id, None)
        if cache is not None:
            cache.clear()

    @property
    def pending(self) -> bool:
        """Finished sequences whose KV is still to be kept (settle)."""
        return bool(self._finished)

    def finish(self, sequence: Sequence, cache: list[Any]) -> None:
        self._finished.append((sequence, cache))

    def snapshot(self, sequence: Sequence, cache: list[Any]) -> None:
        """Makes the KV of a prompt just read findable by later prompts. A cache that only
        grows is left where it is, in the decode batch, and copied out only if a lookup wants
        it before the sequence ends (PrefixCache.expect); once it ends, its answer's entry
        stands for the prompt (the trie drops cut-able prefixes), and a request that stops
        early still leaves its prompt behind. Any other (a sliding window, a recurrent
        state) is kept now, by reference: once decoding went on it could not be cut back,
        while the next turn extends the prompt (the answer's tokens come back re-rendered)."""
        prefixes = self.of(sequence)
        if prefixes is None or sequence.embeddings is not None or not sequence.prompt[1:]:
            return
        tokens = sequence.prompt[:-1]
        if grows_only(cache):
            prefixes.expect(id(sequence), tokens, lambda n: self.copy_of(sequence, n))
        else:
            prefixes.insert(tokens, [share(layer) for layer in cache], to_disk=True)

    def copy_of(self, sequence: Sequence, length: int) -> list[Any] | None:
        """The first `length` tokens of a running sequence's KV, copied out of wherever it
        is now (waiting with a prefix-cache hit, reading its prompt, or decoding)."""
        index = next((i for i, row in enumerate(self._decode.rows) if row is sequence), None)
        if index is not None:
            layers = self._decode.extract(index)
        else:
            cache = self._prefill.cache_for(sequence)
            if cache is None:
                cache = self._hits.get(id(sequence), (None, []))[0]
            if cache is None:
                return None
            layers = [share(layer) for layer in cache]
        cut(layers, length)
        compact(layers, copy_whole=True)
        return layers

    def settle(self) -> None:
        """Keeps finished conversations' KV for their later turns, and their prompts' on disk
        (where the cache can be cut back to them: otherwise snapshot offered it). Done after
        their last events went out (copying a row out of the batch takes ~50 ms at 5k tokens,
        which the answer's last token, or with max_tokens 1 its first, would otherwise wait
        for)."""
        finished, self._finished = self._finished, []
        for sequence, cache in finished:
            prefixes = self.of(sequence)
            compact(cache)
            tokens = sequence.prompt[:-1] + sequence.fed
            prefixes.insert(tokens, cache)
            if prefixes.disk is not None and can_trim_prompt_cache(cache):
                prompt = [share(layer) for layer in cache]
                cut(prompt, len(sequence.prompt) - 1)
                prefixes.offer(sequence.prompt[:-1], prompt, tokens)
