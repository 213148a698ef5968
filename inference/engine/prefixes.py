"""The prefix cache of one loaded model: the KV of prompts (and answers) read before, found by
the longest shared token prefix, so a conversation's next turn reads only its new tokens.

mlx-lm's LRUPromptCache keeps the entries (a token trie, LRU by bytes); what it hands out is
not its deep copy but a shallow one sharing the stored arrays: MLX arrays are values (a write
into a cache makes a new array, and never reuses a buffer another array still holds), so a
request extending a cached prefix copies the prefix at most once, when its cache first grows,
instead of once on every lookup.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import (
    CacheList,
    LRUPromptCache,
    can_trim_prompt_cache,
    trim_prompt_cache,
)

MAX_ENTRIES = 64


def share(layer: Any) -> Any:
    """A cache layer that reads the same arrays as `layer` and can be written alone."""
    if isinstance(layer, CacheList):
        twin = copy.copy(layer)
        twin.caches = tuple(share(c) for c in layer.caches)
        return twin
    twin = copy.copy(layer)
    for name, value in vars(layer).items():
        if isinstance(value, list):  # ArraysCache's slots are written in place
            setattr(twin, name, list(value))
        elif isinstance(value, mx.array):
            setattr(twin, name, _own(value))
        elif isinstance(value, tuple) and all(isinstance(x, mx.array) for x in value):
            setattr(twin, name, tuple(map(_own, value)))  # quantized K/V: (w, scales, biases)
    return twin


def _own(array: mx.array) -> mx.array:
    """The same values as a Python object of the twin's own: a cache writes its arrays in
    place (`keys[..., i:j, :] = ...` rebinds the object), so a twin holding the entry's own
    objects would write into the stored entry (a trimmed hit overwrote its last tokens). A
    view: no copy until the twin writes."""
    return array[...]


@dataclass
class PrefixStats:
    lookups: int = 0
    hits: int = 0  # lookups that reused some prefix
    tokens_reused: int = 0


class PrefixCache:
    """Engine thread only."""

    def __init__(self, model_id: str, max_bytes: int) -> None:
        self.model_id = model_id
        self._memory = LRUPromptCache(max_size=MAX_ENTRIES, max_bytes=max_bytes)
        self.stats = PrefixStats()

    @property
    def nbytes(self) -> int:
        return self._memory.nbytes

    def fetch(self, prompt: list[int]) -> tuple[list[Any] | None, list[int]]:
        """The cache of the longest known prefix of `prompt` (shared, not copied) and the
        tokens past it; at least the prompt's last token is left to read."""
        self.stats.lookups += 1
        cache, rest = self._nearest(prompt)
        if cache is not None and not rest:
            # The whole prompt is cached, but generation needs one token to feed.
            if not can_trim_prompt_cache(cache):
                return None, prompt
            trim_prompt_cache(cache, 1)
            rest = prompt[-1:]
        if cache is not None:
            self.stats.hits += 1
            self.stats.tokens_reused += len(prompt) - len(rest)
        return cache, rest

    def _nearest(self, prompt: list[int]) -> tuple[list[Any] | None, list[int]]:
        memory = self._memory
        found = memory._trie.search(self.model_id, prompt)
        if found.exact is not None:
            return self._shared(found.exact), []
        shorter = len(found.shorter) if found.shorter is not None else 0
        if found.longer is not None and found.common_prefix > shorter:
            entry = memory._trie.get(self.model_id, found.longer)
            if can_trim_prompt_cache(entry.prompt_cache):
                cache = self._shared(found.longer)
                keep = min(len(prompt) - 1, found.common_prefix)
                trim_prompt_cache(cache, len(found.longer) - keep)
                return cache, prompt[keep:]
        if shorter:
            return self._shared(found.shorter), prompt[shorter:]
        return None, prompt

    def _shared(self, tokens: list[int]) -> list[Any]:
        entry = self._memory._trie.get(self.model_id, tokens)
        self._memory._lru.remove(self.model_id, tokens)  # most recently used now
        self._memory._lru.push(self.model_id, tokens, entry.cache_type)
        return [share(layer) for layer in entry.prompt_cache]

    def insert(self, tokens: list[int], cache: list[Any]) -> None:
        """Keeps `cache` (the caller hands it over) as the KV of `tokens`."""
        self._memory.insert_cache(self.model_id, tokens, cache)
