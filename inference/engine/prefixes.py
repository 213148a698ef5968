"""The prefix cache of one loaded model: the KV of prompts (and answers) read before, found by
the longest shared token prefix, so a conversation's next turn reads only its new tokens.

mlx-lm's LRUPromptCache keeps the entries (a token trie, LRU by bytes). A request that
continues an entry (a conversation's next turn) is handed the entry itself, and writes its new
tokens into the entry's buffers (`_hand_over`); any other gets not a deep copy but a shallow
one sharing the stored arrays: MLX arrays are values (a write into a cache makes a new array,
and never reuses a buffer another array still holds), so it copies the prefix at most once,
when its cache is first written. While a request holds an entry, or a prompt it has read, the
cache knows them as the request's (`expect`): a lookup that wants them copies them out of it.

Behind the memory sits the disk tier (`prefix_disk`, when configured): prompts of at least its
minimum length are written there once their answer ends (or as they are read, for caches that
cannot be cut back to them later), and a lookup reads from disk when memory has
no prefix of the prompt, or a shorter one than disk; what it reads joins the memory tier. So a
prefix outlives the process (a restart) and the model's runner (the pool's evictions).
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable
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
from inference.engine.kv import grows_only
from inference.engine.prefix_disk import PrefixDisk

if TYPE_CHECKING:
    from inference.engine.pool import LoadedModel

MAX_ENTRIES = 64
# What copies the first n tokens of a running sequence's KV out of wherever it is now.
Take = Callable[[int], list[Any] | None]
Running = tuple[list[int], Take]  # a running sequence's prompt so far, and its Take
Hit = tuple[list[Any] | None, list[int], list[int] | None]  # cache, tokens past it, source


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


def _common_length(a: list[int], b: list[int]) -> int:
    """How many tokens `a` and `b` start with alike: slices compared by halves (in C)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def _stored(trie: dict) -> list[list[int]]:
    """The token lists of every entry under one model's node of mlx-lm's PromptTrie."""
    found, stack = [], [(trie, [])]
    while stack:
        node, tokens = stack.pop()
        for key, child in node.items():
            if key == "__value__":
                found.append(tokens)
            else:
                stack.append((child, [*tokens, key]))
    return found


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
        self,
        model_id: str,
        max_bytes: int,
        disk: PrefixDisk | None = None,
        disk_key: str = "",
        memory: LRUPromptCache | None = None,
    ) -> None:
        # The model whose KV it keeps: its entries' key in the memory's trie, which a base
        # shares with its LoRA adapters (`memory`: one byte budget, one LRU), each adapter's
        # KV under its own id (never served to another's rows), and its own disk key.
        self.model_id = model_id
        self._memory = (
            memory if memory is not None else LRUPromptCache(MAX_ENTRIES, max_bytes=max_bytes)
        )
        self.stats = PrefixStats()
        self._disk = disk
        self._disk_key = disk_key  # prefix_disk.model_key: whose entries on disk are ours
        self._running: dict[int, Running] = {}  # by the sequence's id: expect()
        # Entries whose arrays a queued disk write also holds: entry tokens -> those offered.
        self._offered: OrderedDict[tuple[int, ...], list[int]] = OrderedDict()

    @classmethod
    def of(
        cls, loaded: LoadedModel, config: EngineConfig, beside: PrefixCache | None = None
    ) -> PrefixCache | None:
        """The prefix cache a runner of `loaded` keeps under `config` (None: reuse is off);
        `beside`: the base's, whose memory an adapter's shares."""
        if not config.prompt_cache_bytes:
            return None
        disk = prefix_disk.shared(config)
        spec = loaded.spec
        key = prefix_disk.model_key(spec, loaded.compute_format, loaded.kernels) if disk else ""
        memory = beside._memory if beside is not None else None
        return cls(spec.model_id, config.prompt_cache_bytes, disk, key, memory)

    @property
    def nbytes(self) -> int:
        """The bytes of its memory (shared with its base's or adapters' caches)."""
        return self._memory.nbytes

    def clear(self) -> None:
        """Its entries out of memory (an adapter unloaded: its id may come back with other
        weights); what it wrote to disk stays, keyed by the files that computed it."""
        memory, self._running = self._memory, {}
        self._offered.clear()
        for tokens in _stored(memory._trie._trie.get(self.model_id, {})):
            entry = memory._trie.pop(self.model_id, tokens)
            memory._lru.remove(self.model_id, tokens)
            memory._n_bytes -= entry.nbytes
            memory._n_bytes_by_type[entry.cache_type] -= entry.nbytes

    def fetch(
        self, prompt: list[int], owner: int | None = None, take: Take | None = None
    ) -> tuple[list[Any] | None, list[int]]:
        """The cache of the longest known prefix of `prompt` and the tokens past it; at
        least the prompt's last token is left to read. With an `owner` (the id of the
        sequence it is for) and a `take`, the stored entry the prompt continues is handed
        over (`_hand_over`) where it may be; any other hit is shared, not copied."""
        self.stats.lookups += 1
        cache, rest, source = self._nearest(prompt)
        if self._realize_nearer(prompt, len(prompt) - len(rest)):
            cache, rest, source = self._nearest(prompt)
        if self._disk is not None:
            cache, rest, source = self._from_disk(self._disk, prompt, cache, rest, source)
        if cache is not None and not rest:
            # The whole prompt is cached, but generation needs one token to feed.
            if not can_trim_prompt_cache(cache):
                return None, prompt
            trim_prompt_cache(cache, 1)
            rest = prompt[-1:]
        elif source is not None and owner is not None and take is not None:
            kept = len(prompt) - len(rest)
            cache = self._hand_over(source, kept, owner, take) or cache
        if cache is not None:
            self.stats.hits += 1
            self.stats.tokens_reused += len(prompt) - len(rest)
        return cache, rest

    def _hand_over(self, source: list[int], kept: int, owner: int, take: Take) -> list[Any] | None:
        """The stored entry of `source` itself, taken out of memory and cut to its first
        `kept` tokens, if its cache only grows and what is cut is at most a quarter of what
        is kept (an answer's tail the client re-rendered otherwise; a longer cut is a branch
        another prompt may still want). The request then writes its new tokens into the
        entry's own buffers (KV caches keep room to grow), where a shared twin would copy
        them whole first: a new buffer each turn (on our 2-core VM a 2,000-token 1.7B
        conversation's 229 MB took 45k page faults, 0.5-0.9 s of its next turn). Until the
        request ends, lookups find the entry as the request's (`expect`), and copy it out of
        it if they need it."""
        if (len(source) - kept) * 4 > kept:
            return None
        memory = self._memory
        entry = memory._trie.get(self.model_id, source)
        if not grows_only(entry.prompt_cache):
            return None
        offered = self._offered.pop(tuple(source), None)
        disk = self._disk
        if offered is not None and disk is not None and not disk.withdraw(self._disk_key, offered):
            return None  # being written: shared, the request's writes copy it
        memory._trie.pop(self.model_id, source)
        memory._lru.remove(self.model_id, source)
        memory._n_bytes -= entry.nbytes
        memory._n_bytes_by_type[entry.cache_type] -= entry.nbytes
        layers = entry.prompt_cache
        if len(source) > kept:
            trim_prompt_cache(layers, len(source) - kept)
        self.expect(owner, source[:kept], take)
        return layers

    def _nearest(self, prompt: list[int]) -> Hit:
        """The memory's longest prefix of `prompt`: (shared cache, tokens past it, the
        entry's tokens)."""
        memory = self._memory
        found = memory._trie.search(self.model_id, prompt)
        if found.exact is not None:
            return self._shared(found.exact), [], found.exact
        shorter = len(found.shorter) if found.shorter is not None else 0
        if found.longer is not None and found.common_prefix > shorter:
            entry = memory._trie.get(self.model_id, found.longer)
            if can_trim_prompt_cache(entry.prompt_cache):
                cache = self._shared(found.longer)
                keep = min(len(prompt) - 1, found.common_prefix)
                trim_prompt_cache(cache, len(found.longer) - keep)
                return cache, prompt[keep:], found.longer
        if shorter:
            return self._shared(found.shorter), prompt[shorter:], found.shorter
        return None, prompt, None

    def expect(self, key: int, tokens: list[int], take: Take) -> None:
        """`tokens` (a prompt just read, or an entry handed over) whose KV lives on in a
        running sequence (`key`: its id), found by lookups as if stored. It is copied out of
        the sequence (`take`) only when a lookup needs it: a snapshot kept beside the running
        cache would share its arrays, and the first decode step's write would copy them whole
        (at 2,000 tokens of a 1.7B model: 229 MB, 56k page faults, 0.5-0.9 s of the next turn
        on our 2-core VM). When the sequence ends, its answer's entry stands for them
        (`forget`)."""
        self._running[key] = (tokens, take)

    def forget(self, key: int) -> None:
        self._running.pop(key, None)

    def realize(self, key: int, to_disk: bool = False) -> None:
        """Stores the running sequence's tokens now: a lookup wants them, or it is cancelled."""
        tokens, take = self._running.pop(key, ([], lambda n: None))
        layers = take(len(tokens)) if tokens else None
        if layers is not None:
            self.insert(tokens, layers, to_disk)

    def _realize_nearer(self, prompt: list[int], cached: int) -> bool:
        """Stores the running prompt sharing most of `prompt`, if more than `cached` tokens."""
        best, most = None, cached
        for key, (tokens, _) in self._running.items():
            if len(tokens) <= most or tokens[: most + 1] != prompt[: most + 1]:
                continue  # shares no more than what was found
            best, most = key, _common_length(tokens, prompt)
        if best is not None:
            self.realize(best)
        return best is not None

    def _from_disk(
        self,
        disk: PrefixDisk,
        prompt: list[int],
        cache: list[Any] | None,
        rest: list[int],
        source: list[int] | None,
    ) -> Hit:
        """The disk's prefix instead of memory's where disk holds a longer one (at most all
        but the prompt's last token, which generation feeds itself)."""
        found = disk.longest(self._disk_key, prompt, len(prompt) - 1)
        if found is None or found.length <= len(prompt) - len(rest):
            if cache is None and len(prompt) > disk.min_tokens:  # one it could have held
                disk.misses += 1
            return cache, rest, source
        layers = disk.read(found, prompt)
        if layers is None:
            return cache, rest, source
        self.stats.disk_hits += 1
        self.stats.disk_tokens += found.length
        tokens = prompt[: found.length]
        self._memory.insert_cache(self.model_id, tokens, layers)
        return [share(layer) for layer in layers], prompt[found.length :], tokens

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

    def offer(self, tokens: list[int], cache: list[Any], entry: list[int]) -> None:
        """Offers the KV of `tokens` to the disk tier alone: `cache` shares the arrays of the
        memory's entry of `entry`. Until written, the offer is taken back if that entry is
        handed over (its next turn's own prompt is offered when that turn ends)."""
        if self._disk is not None and self._disk.offer(self._disk_key, tokens, cache):
            self._offered[tuple(entry)] = tokens
            while len(self._offered) > MAX_ENTRIES:
                self._offered.popitem(last=False)

    @property
    def disk(self) -> PrefixDisk | None:
        return self._disk
