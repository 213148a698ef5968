"""How a chat model's KV cache is kept: the catalog's `kv_cache` made into cache layers.

- "auto": float16 when the model computes in float32 on the CPU with the CPU kernels (its K/V
  would otherwise be float32, twice llama.cpp's f16), else as the model computes them
  ("native").
- "float16": float16 K/V everywhere: mlx-lm's cache classes, casting what comes in, and
  keeping their float16 class through merge, extend, filter and extract.
- "8bit" / "4bit": MLX's affine quantized layout (kv_quantized.py), for the plain KVCache
  layers (inside a CacheList too) and sliding windows (kv_window.py), group 64, or 32 where a
  width needs it (an MLA rope part 32 wide). The widths come from the caches themselves
  (`KVLayout`). Attention takes the packed K/V as they are (engine/attention.py tells them by
  their shapes: sinks and KV-shared layers included); a model whose code works on its cached
  K/V itself (MLA's latent) gets them widened per step (`DequantizedKV`). Other K/V layers
  stay float16, and `describe()` says so. A model with no attention K/V, or widths no group
  divides, is refused at load (`KVRefused`): never a silent float16.

Layers that hold no K/V (ArraysCache of hybrid models) are left as the model makes them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.models.cache import (
    ArraysCache,
    BatchKVCache,
    BatchRotatingKVCache,
    CacheList,
    KVCache,
    RotatingKVCache,
    make_prompt_cache,
)

from inference.engine import attention
from inference.engine.kv_quantized import GROUP_SIZE, DequantizedKV, QuantizedKV, widest_group
from inference.engine.kv_window import QuantizedWindowKV
from inference.engine.types import EngineError, ErrorKind

log = logging.getLogger(__name__)

NATIVE = "native"  # engine-only kind: K/V as the model computes them (the float32 reference)
BITS = {"8bit": 8, "4bit": 4}
KINDS = (NATIVE, "float16", *BITS)
# What "auto" is on a CPU computing in float32: half the memory, and the attention kernel
# (cpu/hooks.py) reads float16 K/V itself. Without the kernels MLX's own attention widens the
# whole cache to float32 on every call (about 5x its float32 time at 2k tokens): NATIVE there.
CPU_AUTO = "float16"
_logged: set[str] = set()


def _once(message: str, *args: object) -> None:
    text = message % args
    if text not in _logged:
        _logged.add(text)
        log.info(text)


def _half(x: mx.array) -> mx.array:
    return x if x.dtype == mx.float16 else x.astype(mx.float16)


def _retype(cache: Any, cls: type) -> Any:
    """mlx-lm's own instance as our subclass (same attributes, no copy)."""
    cache.__class__ = cls
    return cache


STEP = KVCache.step


def capacity(needed: int) -> int:
    """The positions a cache that must hold `needed` is given when it grows: a quarter more,
    rounded up to whole steps. Each growth is a new buffer (its pages faulted in) and a copy
    of the old: mlx-lm's KVCache grows 256 positions at a time, a copy of the whole cache
    for every 256-token chunk of a prompt read, and for nearly every agent turn (hundreds of
    new tokens); a quarter's room makes that a turn in several, at most a quarter spare."""
    return -(-(needed + needed // 4) // STEP) * STEP


def _room(cache: Any, held: int, new_k: mx.array, new_v: mx.array) -> None:
    """Gives `cache` (float16 keys and values, `held` positions in use) room for the new
    ones: grown to the capacity of what it needs, or of what it `expects` (reserve), if
    more."""
    needed = held + new_k.shape[2]
    if cache.keys is not None and needed <= cache.keys.shape[2]:
        return
    size = capacity(max(needed, getattr(cache, "expected", 0)))

    def grown(old: mx.array | None, new: mx.array) -> mx.array:
        batch, heads, _, width = new.shape
        if old is None or held == 0:
            return mx.zeros((batch, heads, size, width), mx.float16)
        tail = mx.zeros((batch, heads, size - held, width), mx.float16)
        return mx.concatenate([old[..., :held, :], tail], axis=2)

    cache.keys, cache.values = grown(cache.keys, new_k), grown(cache.values, new_v)


def reserve(cache: list[Any], positions: int) -> None:
    """Tells a sequence's float16 K/V layers how many positions it expects to hold (its
    prompt and some answer), so that reading a prompt allocates its buffers once, not once
    per chunk. Other layers grow as their classes do."""
    for layer in cache:
        if isinstance(layer, CacheList):
            reserve(list(layer.caches), positions)
        elif isinstance(layer, Float16KVCache):
            layer.expected = positions


class Float16KVCache(KVCache):
    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        # mlx-lm allocates its buffers in the incoming dtype: cast first, they are float16.
        # Room is made first (capacity), so mlx-lm's own growth never runs.
        keys, values = _half(keys), _half(values)
        _room(self, self.offset, keys, values)
        return super().update_and_fetch(keys, values)

    @classmethod
    def merge(cls, caches: list[Any]) -> Float16BatchKVCache:
        return Float16BatchKVCache.merge(caches)


class Float16BatchKVCache(BatchKVCache):
    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        keys, values = _half(keys), _half(values)
        _room(self, self._idx, keys, values)
        return super().update_and_fetch(keys, values)

    @classmethod
    def merge(cls, caches: list[Any]) -> Float16BatchKVCache:
        if all(c.size() == 0 for c in caches):  # mlx-lm makes a plain BatchKVCache here
            return cls([0] * len(caches))
        return super().merge(caches)

    def extract(self, idx: int) -> Float16KVCache:
        return _retype(super().extract(idx), Float16KVCache)


class Float16RotatingKVCache(RotatingKVCache):
    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        return super().update_and_fetch(_half(keys), _half(values))

    @classmethod
    def merge(cls, caches: list[Any]) -> Float16BatchRotatingKVCache:
        return Float16BatchRotatingKVCache.merge(caches)


class Float16BatchRotatingKVCache(BatchRotatingKVCache):
    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        return super().update_and_fetch(_half(keys), _half(values))

    def extract(self, idx: int) -> Float16RotatingKVCache:
        return _retype(super().extract(idx), Float16RotatingKVCache)


FLOAT16 = {KVCache: Float16KVCache, RotatingKVCache: Float16RotatingKVCache}
_BATCH_OF = {KVCache: BatchKVCache, Float16KVCache: Float16BatchKVCache}


def batch_of_one(layer: Any) -> Any:
    """One sequence's cache layer as a batch of one. A plain K/V layer hands its arrays over
    as they are: merge would copy them into exact-size arrays, which the first decode step
    then grows (a second copy); at 5k tokens each costs tens of ms of a next turn. Its arrays
    are this sequence's alone (a prefix-cache twin's grew into new ones while its new tokens
    were read; MLX copies any array still shared before writing into it)."""
    batch_type = _BATCH_OF.get(type(layer))
    if batch_type is None or layer.keys is None:
        return type(layer).merge([layer])
    batch = batch_type([0])
    batch.keys, batch.values = layer.keys, layer.values
    batch.offset += layer.offset
    batch._idx = layer.offset
    return batch


def grows_only(cache: list[Any]) -> bool:
    """Whether every layer only appends K/V (plain or quantized, nested ones included): such
    a cache can always be cut back to any earlier length, however far it has decoded. A
    sliding window (once past its size), a chunked window or a recurrent state cannot."""
    for layer in cache:
        if isinstance(layer, CacheList):
            if not grows_only(list(layer.caches)):
                return False
        elif not isinstance(layer, (KVCache, QuantizedKV)):
            return False
    return True


_SINGLE_OF = {batch: single for single, batch in _BATCH_OF.items()}


def single_of(batch: Any) -> Any | None:
    """A batch of one's layer as that sequence's own, its arrays handed over as they are (the
    reverse of batch_of_one), room to grow included; marked `whole` (arrays of its own, not
    views into a batch's: compacting would only copy them). None where it cannot be, or
    should not: a kind with no such form, a row padded on the left, or more room than a
    quarter (what rows that left needed; kept, it would pin their memory)."""
    single = _SINGLE_OF.get(type(batch))
    if single is None or batch.keys is None or batch.keys.shape[0] != 1:
        return None
    if batch.keys.shape[2] > capacity(batch._idx):  # room left by longer rows gone: a copy
        return None
    if batch.left_padding.tolist() != [0]:
        return None
    layer = single()
    layer.keys, layer.values, layer.offset = batch.keys, batch.values, batch._idx
    layer.whole = True
    return layer


def computes_in_float32(loaded: Any) -> bool:
    """Whether the model's activations (so its K/V) are float32: on a CPU with the kernels
    (their layers take and give float32), converted to float32, or stored so."""
    if loaded.kernels or loaded.compute_format == "float32":
        return True
    return _float_dtype(loaded.model) == mx.float32


def _float_dtype(model: nn.Module) -> mx.Dtype | None:
    for _, array in tree_flatten(model.parameters()):
        if mx.issubdtype(array.dtype, mx.floating):
            return array.dtype
    return None


def resolve(loaded: Any) -> str:
    """The kind of KV cache `loaded` gets: one of KINDS."""
    requested = loaded.spec.kv_cache
    if requested in KINDS:
        return requested
    if requested != "auto":
        _once("unknown kv_cache %r for %s: auto", requested, loaded.spec.model_id)
    on_cpu = mx.default_device() == mx.cpu
    kernels = getattr(loaded, "kernels", False)  # their attention reads float16 K/V itself
    return CPU_AUTO if on_cpu and kernels and computes_in_float32(loaded) else NATIVE


@dataclass
class KVLayout:
    """What a model's cache layers hold, read from the caches themselves: make_prompt_cache's
    layers after a one-token forward pass that is built but never computed (MLX knows every
    shape of a lazy graph), so no attribute of the model code is guessed at."""

    layers: list[Any]  # per cache layer: ("kv", class, key width, value width), nested
    # for a CacheList, or ("state", class) for layers that hold recurrent state
    unbatched: list[str]  # cache classes with no batched form (mlx-lm's ChunkedKVCache, which
    # engine/chunked.py replaces for Llama 4)
    takes_packed: bool | None = None  # whether its code attends over packed tuples as they are

    @classmethod
    def of(cls, model: nn.Module) -> KVLayout:
        caches = make_prompt_cache(model)
        unbatched = sorted({type(c).__name__ for c in _flat(caches) if not hasattr(c, "merge")})
        if unbatched:  # its forward pass would be as unusable as its caches
            return cls([], unbatched)
        model(mx.array([[0]]), cache=caches)
        return cls([_layer_widths(c) for c in caches], unbatched)

    def check_batchable(self) -> None:
        """Refuses (at load) a model whose caches the engine cannot batch, saying why."""
        if self.unbatched:
            raise EngineError(
                ErrorKind.MODEL_UNAVAILABLE,
                f"its {', '.join(self.unbatched)} layers have no batched form, and the "
                "engine batches every sequence",
            )

    def kv_widths(self) -> list[tuple[str, int, int]]:
        """(class name, key width, value width) of every K/V layer, nested ones included."""
        return list(_kv_entries(self.layers))

    def group_for(self) -> int | None:
        """The quantization group every plain K/V layer's widths take (None: none fits)."""
        widths = [w for name, k, v in self.kv_widths() if name in _QUANTIZED for w in (k, v)]
        return widest_group(*widths) if widths else None


# The layers the quantized formats replace: plain K/V and sliding windows (kv_window.py).
_QUANTIZED = {"KVCache", "RotatingKVCache"}


def _layer_widths(cache: Any) -> Any:
    if isinstance(cache, CacheList):
        return [_layer_widths(c) for c in cache.caches]
    keys, values = getattr(cache, "keys", None), getattr(cache, "values", None)
    if isinstance(keys, mx.array) and isinstance(values, mx.array):
        return ("kv", type(cache).__name__, keys.shape[-1], values.shape[-1])
    return ("state", type(cache).__name__)


def _kv_entries(layers: list[Any]):
    for layer in layers:
        if isinstance(layer, list):
            yield from _kv_entries(layer)
        elif layer[0] == "kv":
            yield layer[1:]


def layout_of(loaded: Any) -> KVLayout:
    """The loaded model's layout, read once (the pool reads it at load)."""
    if getattr(loaded, "kv_layout", None) is None:
        loaded.kv_layout = KVLayout.of(loaded.model)
    return loaded.kv_layout


class KVRefused(EngineError):
    """The catalog's kv_cache cannot apply to this model: the load is refused, saying why."""

    def __init__(self, kind: str, why: str) -> None:
        super().__init__(ErrorKind.MODEL_UNAVAILABLE, f"its KV cache {kind} cannot apply: {why}")


class KVFormat:
    """Makes one sequence's cache layers in one kind, for one model."""

    def __init__(self, model: nn.Module, kind: str, layout: KVLayout | None = None) -> None:
        self.model = model
        self.kind = kind
        self.bits = BITS.get(kind)
        self.group = GROUP_SIZE
        self.dequantize = False  # its code works on K/V itself: handed arrays (kv_quantized)
        self.layout = layout
        if self.bits:
            self.layout = layout or KVLayout.of(model)
            self._fit(self.layout)

    def _fit(self, layout: KVLayout) -> None:
        """The group the layers' widths take, and whether the model's code attends over packed
        K/V as they are; refused (KVRefused) where quantized K/V cannot apply at all."""
        widths = layout.kv_widths()
        held = [(k, v) for name, k, v in widths if name in _QUANTIZED]
        if not held:
            kinds = sorted({name for name, _, _ in widths}) or ["recurrent state only"]
            raise KVRefused(self.kind, f"the model has no attention K/V layers ({kinds})")
        group = layout.group_for()
        if group is None:
            shown = sorted({w for pair in held for w in pair})
            raise KVRefused(self.kind, f"its K/V widths {shown} are not multiples of 32")
        self.group = group
        attention.install(self.model)  # tells packed K/V by their own shapes
        if layout.takes_packed is None:
            layout.takes_packed = self._builds() is None
        self.dequantize = not layout.takes_packed
        failure = self._builds() if self.dequantize else None
        if failure is not None:
            raise KVRefused(self.kind, f"its attention fails on quantized K/V ({failure})")

    def _builds(self) -> Exception | None:
        """What a forward pass over this format's caches raises (built, never computed), if
        anything: MLA's code multiplies its cached latent itself, and fails on a tuple."""
        try:
            self.model(mx.array([[0]]), cache=self.make())
        except (TypeError, AttributeError, ValueError, IndexError) as exc:
            return exc
        return None

    @classmethod
    def of(cls, loaded: Any) -> KVFormat:
        kind = resolve(loaded)
        layout = layout_of(loaded)
        layout.check_batchable()
        made = cls(loaded.model, kind, layout)
        _once(
            "%s: KV cache %s (%s asked)",
            loaded.spec.model_id,
            made.describe(),
            loaded.spec.kv_cache,
        )
        return made

    def describe(self) -> str:
        """What the cache really is, for /health, the dashboard and the admin."""
        if not self.bits:
            return self.kind
        parts = [f"group {self.group}"]
        if self.dequantize:
            parts.append("widened per step for its attention code")
        # Windows are packed unless the model's code works on its K/V itself (kv_window.py
        # hands back packed tuples only).
        packed = {"KVCache"} if self.dequantize else _QUANTIZED
        kept = sorted({name for name, _, _ in self.layout.kv_widths()} - packed)
        if kept:
            parts.append(f"{', '.join(kept)} layers float16")
        return f"{self.kind} ({'; '.join(parts)})"

    def make(self) -> list[Any]:
        layers = make_prompt_cache(self.model)
        if self.kind == NATIVE:
            return layers
        return [self.convert(layer) for layer in layers]

    def convert(self, layer: Any) -> Any:
        """A fresh layer of mlx-lm's as this kind keeps it."""
        if self.bits and type(layer) is KVCache:
            made = DequantizedKV if self.dequantize else QuantizedKV
            return made(self.group, self.bits)
        if self.bits and type(layer) is RotatingKVCache and not self.dequantize:
            return QuantizedWindowKV(layer.max_size, self.group, self.bits, layer.keep)
        if isinstance(layer, CacheList):
            layer.caches = tuple(self.convert(c) for c in layer.caches)
            return layer
        return self._float16(layer)

    def _float16(self, layer: Any) -> Any:
        cls = FLOAT16.get(type(layer))
        if cls is not None:
            if self.bits and cls is not Float16KVCache:
                _once("KV cache %s: %s layers stay float16", self.kind, type(layer).__name__)
            return _retype(layer, cls)
        if not isinstance(layer, ArraysCache):  # ArraysCache holds state, not K/V
            _once(
                "KV cache %s: %s layers kept as the model makes them",
                self.kind,
                type(layer).__name__,
            )
        return layer


def _flat(caches: list[Any]):
    """Cache layers, a CacheList's own layers in its place."""
    for cache in caches:
        if isinstance(cache, CacheList):
            yield from _flat(list(cache.caches))
        else:
            yield cache
