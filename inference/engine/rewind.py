"""What a verification step does to cache layers that cannot drop positions.

Plain K/V layers (float16 or quantized) drop a rejected draft's positions (speculative.py's
trim and roll_back). Recurrent and convolution state (gated delta, Mamba, LFM2's short conv:
mlx-lm's ArraysCache) folds every position it is fed into one state, and a sliding window
(rotating K/V, float16 or packed) has overwritten or trimmed what it held before them: neither
can be cut back by trimming. For those layers a verification is bracketed:

- windows roll what a row did not keep to its front as padding (`Rewind.cut_windows`);
- recurrent state gets each row's real length (`prepare`, as a prompt chunk's right padding
  does), so a row's padding never reaches it, and is saved before the step with the windows
  (references: the forward replaces these arrays, never writes into them, so this copies
  nothing); when every row keeps all it fed, the state is already right;
- when some row of such a model rejects a draft token, the saved state comes back (windows
  too) and the positions each row keeps are fed again (the replay): the cut layers drop the
  whole verification first and the replay's padding after, so every layer ends holding
  exactly the kept tokens. The replay's logits are never read, so MLX computes only what the
  caches need (no head).

mlx-lm's own caches and model code do the rest (the same lengths mask a batched prompt uses).
"""

from __future__ import annotations

import copy
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache, BatchRotatingKVCache, CacheList

from inference.engine.kv_quantized import BatchQuantizedKVCache
from inference.engine.kv_window import QuantizedBatchWindowKV

CUT = (BatchKVCache, BatchQuantizedKVCache)  # layers that drop positions themselves


def leaves(cache: list[Any]) -> list[Any]:
    """Every cache layer, a CacheList's own layers in its place."""
    out: list[Any] = []
    for layer in cache:
        out.extend(leaves(list(layer.caches)) if isinstance(layer, CacheList) else [layer])
    return out


def cut_layers(cache: list[Any]) -> list[Any]:
    return [layer for layer in leaves(cache) if isinstance(layer, CUT)]


def kept_layers(cache: list[Any]) -> list[Any]:
    return [layer for layer in leaves(cache) if not isinstance(layer, CUT)]


def state_layers(cache: list[Any]) -> list[Any]:
    """The layers that fold positions into a state (recurrent, convolution): those a
    rejection has to be replayed for."""
    return [layer for layer in kept_layers(cache) if not is_window(layer)]


class Saved:
    """Layers' attributes as they were: arrays by reference, through an identity node, since
    MLX's in-place operators (`lengths -= n`, a slice assigned) change the array object itself;
    lists copied; nested caches (a packed window's three parts) saved alike."""

    def __init__(self, layers: list[Any]) -> None:
        self._saved = [self._save(layer) for layer in layers]

    @classmethod
    def _save(cls, obj: Any) -> tuple[Any, dict[str, Any], list[Any]]:
        state = {name: _kept(value) for name, value in vars(obj).items()}
        inner = [cls._save(c) for c in getattr(obj, "caches", ()) if hasattr(c, "__dict__")]
        return obj, state, inner

    def restore(self) -> None:
        for saved in self._saved:
            _restore(saved)


def _kept(value: Any) -> Any:
    if isinstance(value, mx.array):
        return mx.stop_gradient(value)  # shares the buffer; a new node the layer cannot alter
    if isinstance(value, list | tuple):
        return type(value)(_kept(v) for v in value)
    return copy.copy(value) if isinstance(value, dict) else value


def _restore(saved: tuple[Any, dict[str, Any], list[Any]]) -> None:
    obj, state, inner = saved
    obj.__dict__.clear()
    obj.__dict__.update(state)
    for child in inner:
        _restore(child)


def is_window(layer: Any) -> bool:
    return isinstance(layer, BatchRotatingKVCache | QuantizedBatchWindowKV)


def _parts(window: Any) -> list[Any]:
    """A window's rotating caches: itself, or a packed window's three."""
    return list(getattr(window, "caches", [window]))


class Rewind:
    """One verification's bracket around the layers that cannot drop positions (none: every
    method does nothing, and the step is the plain K/V one).

    A window fed several positions at once puts its positions in order and appends them
    (mlx-lm's concatenating update), keeping the window's worth before them: dropping a row's
    last positions is then rolling them to its front as padding, what a padded prompt chunk
    gets (`cut_windows`). Only recurrent state has to be replayed (`needs_replay`)."""

    def __init__(self, cache: list[Any], lengths: list[int]) -> None:
        self.windows = [layer for layer in kept_layers(cache) if is_window(layer)]
        self.states = state_layers(cache)
        self._offsets = [[mx.stop_gradient(p.offset) for p in _parts(w)] for w in self.windows]
        # Only a replay goes back, and only a model with recurrent state replays.
        self._saved = Saved(self.windows + self.states) if self.states else None
        self._padded: list[Any] = []
        self._pad(self.states, lengths)

    @property
    def needs_replay(self) -> bool:
        """Whether a rejection must be fed again: some layer folds positions into a state."""
        return bool(self.states)

    def _pad(self, layers: list[Any], lengths: list[int]) -> None:
        width = max(lengths)
        padding = [width - n for n in lengths]
        self._padded = layers if any(padding) else []
        for layer in self._padded:
            layer.prepare(lengths=lengths, right_padding=padding)

    def settle(self) -> None:
        """After a forward pass: the padding's effects dropped (windows rolled, masks off)."""
        for layer in self._padded:
            layer.finalize()
        self._padded = []

    def cut_windows(self, keeps: list[int]) -> None:
        """Each row's positions past its `keeps[i]` rolled out of every window."""
        kept = mx.array(keeps)
        for window, offsets in zip(self.windows, self._offsets, strict=True):
            for part, before in zip(_parts(window), offsets, strict=True):
                part._lengths = before + kept  # finalize rolls right what lies past it
                part.finalize()

    def back(self, lengths: list[int]) -> None:
        """The saved state again (windows too), set for a replay feeding `lengths` tokens a
        row."""
        assert self._saved is not None
        self._saved.restore()
        self._pad(self.windows + self.states, lengths)
