"""The prefix cache of one loaded model: the KV of prompts (and answers) read before, found by
the longest shared token prefix, so a conversation's next turn reads only its new tokens.

mlx-lm's LRUPromptCache keeps the entries (a token trie, LRU by bytes); what it hands out is
not its deep copy but a shallow one sharing the stored arrays: MLX arrays are values (a write
into a cache makes a new array, and never reuses a buffer another array still holds), so a
request extending a cached prefix copies the prefix at most once, when its cache first grows,
instead of once on every lookup.

Behind the memory sits the disk tier (`prefix_disk`, when configured): prompts of at least its
minimum length are written there as they are read, and a lookup reads from disk when memory has
no prefix of the prompt, or a shorter one than disk; what it reads joins the memory tier. So a
prefix outlives the process (a restart) and the model's runner (the pool's evictions).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mlx.core as mx
from mlx_lm.models.cache import (
    CacheList,
    LRUPromptCache,
    _BaseCache,
    can_trim_prompt_cache,
    trim_prompt_cache,
)

from inference.engine import prefix_disk
from inference.engine.config import EngineConfig
from inference.engine.prefix_disk import PrefixDisk

if TYPE_CHECKING:
    from inference.engine.pool import LoadedModel

MAX_ENTRIES = 64


def share(layer: Any) -> Any:
    """A cache layer that reads the same arrays as `layer` and can be written alone."""
    if isinstance(layer, CacheList):
        twin = copy.copy(layer)
        twin.caches = tuple(share(c) for c in layer.caches)
        return twin
    twin = copy.copy(layer)
    for name, value in vars(layer).items():
        if isinstance(value, list):  # ArraysCache's slots are written in place; a packed
            # window's parts (kv_window.py) are caches, each shared the same way
            setattr(twin, name, [share(v) if isinstance(v, _BaseCache) else v for v in value])
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
    disk_hits: int = 0  # lookups served from the disk tier
    disk_tokens: int = 0  # prompt tokens those held


class PrefixCache:
    """Engine thread only."""

    def __init__(
        self, model_id: str, max_bytes: int, disk: PrefixDisk | None = None, disk_key: str = ""
    ) -> None:
        self.model_id = model_id
        self._memory = LRUPromptCache(max_size=MAX_ENTRIES, max_bytes=max_bytes)
        self.stats = PrefixStats()
        self._disk = disk
        self._disk_key = disk_key  # prefix_disk.model_key: whose entries on disk are ours

    @classmethod
    def of(cls, loaded: LoadedModel, config: EngineConfig) -> PrefixCache | None:
        """The prefix cache a runner of `loaded` keeps under `config` (None: reuse is off)."""
        if not config.prompt_cache_bytes:
            return None
        disk = prefix_disk.shared(config)
        spec = loaded.spec
        key = prefix_disk.model_key(spec, loaded.compute_format, loaded.kernels) if disk else ""
        return cls(spec.model_id, config.prompt_cache_bytes, disk, key)

    @property
    def nbytes(self) -> int:
        return self._memory.nbytes

    def fetch(self, prompt: list[int]) -> tuple[list[Any] | None, list[int]]:
        """The cache of the longest known prefix of `prompt` (shared, not copied) and the
        tokens past it; at least the prompt's last token is left to read."""
        self.stats.lookups += 1
        cache, rest = self._nearest(prompt)
        if self._disk is not None:
            cache, rest = self._from_disk(self._disk, prompt, cache, rest)
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

    def _from_disk(
        self, disk: PrefixDisk, prompt: list[int], cache: list[Any] | None, rest: list[int]
    ) -> tuple[list[Any] | None, list[int]]:
        """The disk's prefix instead of memory's where disk holds a longer one (at most all
        but the prompt's last token, which generation feeds itself)."""
        found = disk.longest(self._disk_key, prompt, len(prompt) - 1)
        if found is None or found.length <= len(prompt) - len(rest):
            if cache is None and len(prompt) > disk.min_tokens:  # one it could have held
                disk.misses += 1
            return cache, rest
        layers = disk.read(found, prompt)
        if layers is None:
            return cache, rest
        self.stats.disk_hits += 1
        self.stats.disk_tokens += found.length
        self._memory.insert_cache(self.model_id, prompt[: found.length], layers)
        return [share(layer) for layer in layers], prompt[found.length :]

    def _shared(self, tokens: list[int]) -> list[Any]:
        entry = self._memory._trie.get(self.model_id, tokens)
        self._memory._lru.remove(self.model_id, tokens)  # most recently used now
        self._memory._lru.push(self.model_id, tokens, entry.cache_type)
        return [share(layer) for layer in entry.prompt_cache]

    def insert(self, tokens: list[int], cache: list[Any], to_disk: bool = False) -> None:
        """Keeps `cache` (the caller hands it over) as the KV of `tokens`; `to_disk`: also
        on disk, if long enough (a prompt just read: what a later turn starts with)."""
        self._memory.insert_cache(self.model_id, tokens, cache)
        if to_disk and self._disk is not None:
            self._disk.offer(self._disk_key, tokens, cache)

    @property
    def disk(self) -> PrefixDisk | None:
        return self._disk
