"""LoRA adapters decoding in their base's batch: per-row adapter weights in the batched matmul.

An adapter folder is what mlx-lm's `load(adapter_path=)` reads: adapter_config.json
(`fine_tune_type`, `lora_parameters.scale`...) and adapters.safetensors (`...q_proj.lora_a`,
`...lora_b` per adapted linear). mlx-lm applies one by replacing the base model's linears with
`LoRALinear`s, which would change the base for every request; fusing the adapter into the
weights and back per step cannot serve both in one batch either.

Here, as S-LoRA and vLLM do, the base's model serves its adapters' rows in its own batch: each
linear some adapter adapts becomes an `AdaptedLinear` around the base's own linear, holding
each adapter's A and B (outside the model's parameters: the adapter costs only them). A
forward's rows are told which adapter each serves (`LoRASet.rows`, set by prefill and decode
around the model call); the linear computes `base(x)` once for every row and adds
`scale * (x @ A) @ B` to the rows of each adapter (each row's A and B picked from the
adapters' stacked matrices by mx.gather_mm, base rows a zero slot; or, one adapter, its rows
gathered, two small matmuls, added back: as mlx-lm's LoRALinear computes it when every row is
the adapter's; MODE).
Base rows add nothing, and a batch without adapter rows is the base's own: the CPU kernels'
fused llama block sees an adapted linear's base linear then (`plain`, cpu/fused.py) and keeps
its fused path; with an adapter row in the batch the adapted blocks take mlx-lm's per-op path
around the kernels' linears (the fused primitives compute the query inside `decoder_layer`,
where no low-rank term can be added without the kernels' help).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from inference.engine.types import EngineError, ErrorKind

CONFIG, WEIGHTS = "adapter_config.json", "adapters.safetensors"
# How the rows get their low-rank terms where a linear holds several adapters: "stacked"
# (every adapter's A and B stacked behind a zero slot, each row's picked by mx.gather_mm: two
# products for the whole batch), or "grouped" (each adapter's rows gathered, two matmuls,
# added back at their rows: two products per adapter). bench/lora_mixed.py times both: at
# c=12 with 2 rank-8 adapters on the demo model's q and v, stacked kept 0.84 of the base's
# tokens/s, grouped 0.79 (the per-op path alone, which adapted blocks take while an adapter
# row is in the batch, 0.88). A linear with one adapter adds it grouped (mlx-lm's own sum when
# every row is the adapter's).
MODE = {"lora": "stacked"}

# An adapter's matrices at one linear: (A [in, r], B [r, out], scale).
Pair = tuple[mx.array, mx.array, float]
# The rows of one forward that an adapter serves: None for every row, else their indices.
Group = tuple[str, mx.array | None]


def _refused(message: str) -> EngineError:
    return EngineError(ErrorKind.MODEL_UNAVAILABLE, message)


def read_adapter(folder: Path) -> tuple[dict, dict[str, mx.array]]:
    """The adapter's config and its LoRA matrices (evaluated: MLX ties a lazy array to the
    thread that made it), refused unless mlx-lm LoRA on linears."""
    try:
        config = json.loads((folder / CONFIG).read_text())
        weights = mx.load(str(folder / WEIGHTS))
    except (OSError, ValueError) as exc:
        raise _refused(f"its adapter could not be read from {folder}: {exc}") from None
    kind = config.get("fine_tune_type", "lora")
    if kind != "lora":
        raise _refused(f"its adapter is {kind!r}; only LoRA adapters share their base's weights")
    if "scale" not in config.get("lora_parameters", {}):
        raise _refused("its adapter_config.json has no lora_parameters.scale")
    mx.eval(list(weights.values()))
    return config, weights


class _Adapters:
    """What an adapted linear holds beside its base linear, kept out of the module's
    parameters (a plain object, not an array, list or dict): the model's parameters stay the
    base's, and each adapter's matrices are its own."""

    def __init__(self) -> None:
        self.pairs: dict[str, Pair] = {}
        self._stacked: tuple[tuple[str, ...], mx.array, mx.array] | None = None

    def stack(self, order: tuple[str, ...]) -> tuple[mx.array, mx.array]:
        """A and B of the set's adapters in its `order` behind a zero slot (base rows),
        zeros too for an adapter that leaves this linear alone, ranks padded with zeros
        (which add exactly nothing): for MODE "stacked"."""
        if self._stacked is None or self._stacked[0] != order:
            a0, b0, _ = next(iter(self.pairs.values()))
            rank = max(a.shape[1] for a, _, _ in self.pairs.values())
            none = (
                mx.zeros((a0.shape[0], rank), a0.dtype),
                mx.zeros((rank, b0.shape[1]), b0.dtype),
            )
            a_rows, b_rows = [none[0]], [none[1]]
            for name in order:
                a, b, _ = self.pairs.get(name, (*none, 0.0))
                a_rows.append(mx.pad(a, [(0, 0), (0, rank - a.shape[1])]))
                b_rows.append(mx.pad(b, [(0, rank - b.shape[0]), (0, 0)]))
            self._stacked = (order, mx.stack(a_rows), mx.stack(b_rows))
            mx.eval(self._stacked[1:])
        return self._stacked[1], self._stacked[2]


class AdaptedLinear(nn.Module):
    """A base model's linear with its adapters' low-rank terms for the rows that ask."""

    def __init__(self, linear: nn.Module, rows: LoRASet) -> None:
        super().__init__()
        self.linear = linear
        object.__setattr__(self, "_rows", rows)  # the forward's rows, shared by the model
        object.__setattr__(self, "_adapters", _Adapters())

    @property
    def plain(self) -> nn.Module | None:
        """The base's linear when no row of this forward has an adapter (cpu/fused.py then
        computes the block as the base alone would), else None."""
        return self.linear if self._rows.current is None else None

    @property
    def x_bytes(self) -> Any:
        return self.linear.x_bytes  # a kernels' linear: how it rounds its activations

    @property
    def pairs(self) -> dict[str, Pair]:
        return self._adapters.pairs

    def add(self, name: str, pair: Pair) -> None:
        self._adapters.pairs[name] = pair

    def remove(self, name: str) -> None:
        self._adapters.pairs.pop(name, None)

    def __call__(self, x: mx.array) -> mx.array:
        y = self.linear(x)
        groups = self._rows.current
        if groups is None:
            return y
        if MODE["lora"] == "stacked" and len(self._adapters.pairs) > 1:
            a, b = self._adapters.stack(self._rows.order)
            slot, scale = self._rows.slots()
            z = mx.gather_mm(mx.gather_mm(x, a, rhs_indices=slot), b, rhs_indices=slot)
            return y + (scale * z).astype(x.dtype)
        pairs = self._adapters.pairs
        for name, rows in groups:
            pair = pairs.get(name)
            if pair is None:  # the adapter leaves this linear as its base's
                continue
            a, b, scale = pair
            if rows is None:  # every row is this adapter's: mlx-lm's LoRALinear
                y = y + (scale * ((x @ a) @ b)).astype(x.dtype)
            else:
                z = (scale * ((x[rows] @ a) @ b)).astype(x.dtype)
                y = y.at[rows].add(z)
        return y


class LoRASet:
    """The adapters attached to one base model, and which adapter each row of the forward
    being built serves. Engine thread only (the runner's forwards, the pool's attach and
    detach between steps)."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.current: list[Group] | None = None  # None: no adapter row in this forward
        self._linears: dict[str, AdaptedLinear] = {}
        self._adapters: dict[str, list[str]] = {}  # adapter -> the paths it adapts
        self._scales: dict[str, float] = {}
        self.order: tuple[str, ...] = ()  # the adapters, as the stacked matrices hold them
        # By the rows' adapters (a forward's; prefill's and decode's alternate): their
        # grouping, and lazily each row's slot and scale for the stacked matrices.
        self._seen: dict[tuple[str | None, ...], list] = {}
        self._now: list = [None, None]

    @property
    def names(self) -> list[str]:
        return list(self._adapters)

    def attach(self, name: str, config: dict, weights: dict[str, mx.array]) -> int:
        """The adapter's A and B on the base's linears (wrapped once, the first adapter
        on each); returns the bytes they add. Refused, the base left as it was, unless every
        pair names one of the base's linears."""
        scale = float(config["lora_parameters"]["scale"])
        named = dict(self.model.named_modules())
        pairs = {}
        for path in sorted({key.rsplit(".", 1)[0] for key in weights}):
            a, b = weights.get(f"{path}.lora_a"), weights.get(f"{path}.lora_b")
            target = named.get(path)
            if isinstance(target, AdaptedLinear):
                target = target.linear
            if a is None or b is None or not _fits(target, a, b):
                raise _refused(
                    f"its adapter's {path} is not a LoRA pair on one of the base's linears"
                )
            pairs[path] = (a, b, scale)
        wrapped = []
        for path, pair in pairs.items():
            linear = self._linears.get(path)
            if linear is None:
                linear = self._linears[path] = AdaptedLinear(named[path], self)
                wrapped.append((path, linear))
            linear.add(name, pair)
        if wrapped:
            self.model.update_modules(_tree(wrapped))
        self._adapters[name], self._scales[name] = list(pairs), scale
        self.order, self._seen = tuple(self._adapters), {}
        return sum(array.nbytes for array in weights.values())

    def detach(self, name: str) -> None:
        """The adapter's matrices gone; linears no adapter adapts any more are the base's
        own again (the model's tree as it was loaded)."""
        unwrapped = []
        for path in self._adapters.pop(name, []):
            linear = self._linears[path]
            linear.remove(name)
            if not linear.pairs:
                del self._linears[path]
                unwrapped.append((path, linear.linear))
        if unwrapped:
            self.model.update_modules(_tree(unwrapped))
        self._scales.pop(name, None)
        self.order, self._seen, self.current = tuple(self._adapters), {}, None

    @contextmanager
    def rows(self, adapters: list[str | None]) -> Iterator[None]:
        """Around a forward whose batch rows serve `adapters` (None: the base): the adapted
        linears add each adapter's term to its rows while the graph is built."""
        self.current = self._grouped(adapters) if self._adapters else None
        try:
            yield
        finally:
            self.current = None

    def _grouped(self, adapters: list[str | None]) -> list[Group] | None:
        key = tuple(adapters)
        seen = self._seen.get(key)
        if seen is None:  # rows joined or left: grouped again
            groups: dict[str, list[int]] = {}
            for i, name in enumerate(key):
                if name is not None:
                    groups.setdefault(name, []).append(i)
            whole = len(key)
            grouped = [
                (name, None if len(rows) == whole else mx.array(rows, dtype=mx.uint32))
                for name, rows in groups.items()
            ]
            if len(self._seen) >= 8:
                self._seen.clear()
            seen = self._seen[key] = [key, grouped, None]
        self._now = seen
        return seen[1] or None

    def slots(self) -> tuple[mx.array, mx.array]:
        """Each row of this forward's slot in the stacked matrices (0: the base's zeros),
        and its adapter's scale, shaped (rows, 1, 1): made once for all the linears."""
        now = self._now
        if now[2] is None:
            index = {name: i + 1 for i, name in enumerate(self.order)}
            slot = mx.array([index[n] if n else 0 for n in now[0]], dtype=mx.uint32)
            scale = mx.array([self._scales[n] if n else 0.0 for n in now[0]])
            now[2] = (slot, scale.reshape(-1, 1, 1))
        return now[2]


def _fits(linear: Any, a: mx.array, b: mx.array) -> bool:
    """Whether `linear` is a linear (no embedding) that A [in, r] and B [r, out] fit: its
    output's shape is built, not computed (a float or quantized linear, the kernels' too)."""
    if not isinstance(linear, nn.Module) or isinstance(
        linear, nn.Embedding | nn.QuantizedEmbedding
    ):
        return False
    if "weight" not in linear or a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        return False
    try:
        out = linear(mx.zeros((1, a.shape[0]), dtype=mx.float32))
    except (ValueError, TypeError):
        return False
    return out.shape == (1, b.shape[1])


def _tree(modules: list[tuple[str, nn.Module]]) -> Any:
    from mlx.utils import tree_unflatten

    return tree_unflatten(modules)
