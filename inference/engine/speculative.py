"""Speculative decoding inside the decode batch: what a verification step keeps.

A speculating row feeds its next input and its drafter's tokens in the batch's one forward
(rows without a draft feed their input and padding). Position j's logits are the model's
distribution after the input and the first j draft tokens, so the row samples every position
as it would have without speculation, and keeps the draft up to its first token that differs
from the sample, plus that sample. For a greedy row that is the longest matching prefix and
the model's next token. For a sampled row it is speculative sampling's rule for a drafter that
puts all its probability on its token: the draft token t is kept with probability p(t), and
otherwise the token comes from p without t, renormalised; both are what drawing x ~ p and
comparing x with t gives. Each position draws with the row's own next uniform and only the
kept positions' uniforms are used up, so a seed gives the same tokens with or without it.

Every row then drops its cache positions past what it kept: all rows the common part (trim),
and a row that kept fewer moves its first positions into the rest and counts them as left
padding (roll_back). That is what plain K/V layers (float16 or quantized) do; sliding windows
roll a row's rejected positions out, and recurrent state, which cannot drop positions, is fed
each row's kept tokens again after a rejection (rewind.py), which the width's expected cost
counts.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import TokenBuffer

from inference.engine.cpu.ext import ext
from inference.engine.drafter import MAX_DRAFT_TOKENS
from inference.engine.rewind import CUT, cut_layers, leaves
from inference.engine.stepwise import one_by_one


@dataclass
class SpeculationStats:
    """A runner's counts since it started, for the metrics to read."""

    steps: int = 0  # verification steps (at least one row had a draft)
    drafted: int = 0  # draft tokens fed
    accepted: int = 0  # draft tokens kept
    replays: int = 0  # steps that fed kept tokens again to recurrent state (rewind.py)
    # Per drafter ("ngram", "draft_model", "mtp"): [draft tokens fed, kept].
    drafters: dict[str, list[int]] = field(default_factory=dict)

    def count(self, drafted: int, accepted: int, drafter: str = "") -> None:
        self.drafted += drafted
        self.accepted += accepted
        if drafter and drafted:
            counts = self.drafters.setdefault(drafter, [0, 0])
            counts[0] += drafted
            counts[1] += accepted


# What a verification step costs: each position a row feeds beyond its own next token adds
# GAMMA of a plain step. On a CPU the step is compute-bound past a few rows, so a position
# costs more the more rows share it (measured on the demo model, 2 cores: 0.25 of a step at one
# row, 0.57 at eight); on a GPU a few more positions are nearly free.
CPU_GAMMA = (0.2, 0.05, 0.6)  # base, per row, at most
GPU_GAMMA = 0.1
PRIOR = 0.8  # a new row's draft tokens are taken as this likely to be right
# A replay (rewind.py) against its verification: the same rows, no wider, no head.
REPLAY = 0.9
DECAY = 0.7  # weight of a row's history against its latest draft
REST = 0.05  # how far a row's estimate returns toward PRIOR in a step it did not draft


def gamma(rows: int) -> float:
    if mx.default_device() == mx.gpu:
        return GPU_GAMMA
    base, per_row, most = CPU_GAMMA
    return min(most, base + per_row * rows)


@dataclass
class TrackRecord:
    """A row's recent drafts as a chance `p` that each next draft token is right (each one
    checked only if those before it were): expected kept tokens of a draft of k are
    p + p^2 + ... + p^k."""

    right: float = 2 * PRIOR
    checked: float = 2.0

    @property
    def p(self) -> float:
        return self.right / self.checked

    def expected(self, k: int) -> float:
        p = self.p
        return k if p >= 1 else p * (1 - p**k) / (1 - p)

    def update(self, fed: int, kept: int) -> None:
        checked = kept + (1 if kept < fed else 0)  # up to and with the first wrong token
        self.right = DECAY * self.right + kept
        self.checked = DECAY * self.checked + checked

    def rest(self) -> None:
        self.right += REST * (2 * PRIOR - self.right)
        self.checked += REST * (2.0 - self.checked)


def best_width(drafts: list[list[int]], records: list[TrackRecord], replays: bool = False) -> int:
    """The step's width (each row's next token and up to width - 1 draft tokens; rows are
    padded to it) with the most expected tokens per unit of step time; 1: a plain step.
    `replays`: the model has recurrent state (rewind.py), so a step where any row rejects a
    draft token costs a second pass (REPLAY of the first)."""
    rows, g = len(drafts), gamma(len(drafts))
    best, width = float(rows), 1
    pairs = list(zip(drafts, records, strict=True))
    for w in range(2, 2 + max((len(d) for d in drafts), default=0)):
        gain = sum(r.expected(min(len(d), w - 1)) for d, r in pairs)
        cost = 1 + g * (w - 1)
        if replays:
            all_right = 1.0
            for d, r in pairs:
                all_right *= r.p ** min(len(d), w - 1)
            cost *= 1 + REPLAY * (1 - all_right)
        rate = (rows + gain) / cost
        if rate > best:
            best, width = rate, w
    return width


def worth_asking(record: TrackRecord, rows: int) -> int:
    """How many tokens to ask of a drafter whose guesses cost time of their own (a draft
    model's forward per token): those each more likely to be kept than a position costs.
    None, while a row's drafts keep failing; its record drifts back toward PRIOR in the
    steps it skips (TrackRecord.rest), so it tries again later."""
    p, g = record.p, gamma(rows)
    tokens = 0
    while tokens < MAX_DRAFT_TOKENS and p ** (tokens + 1) > g:
        tokens += 1
    return tokens


class Context(TokenBuffer):
    """The tokens a row's logits processors see; a verification step takes back the
    positions it rejected."""

    @property
    def size(self) -> int:
        return self._size

    def trim(self, n: int) -> None:
        self._size -= n


@contextmanager
def plain_numerics(rows: int) -> Iterator[None]:
    """A verification pass of a batch of `rows` computed as their plain step would be. The CPU
    kernels pick each quantized matmul's path by its row count (direct integer, float, tiled
    integer), and a verification feeds several positions a row: left to choose, it could take
    another path than the plain step (logits ~1e-3 apart: greedy ties could break the other
    way). Every path gives a row the same result in any batch, so choosing as for `rows`
    rows is enough. Everything must be evaluated inside; work queued before (another model's
    pipelined step) is finished first, so that it keeps its own choice. Mamba-2's scan goes
    a position at a time meanwhile, as plain steps feed it (stepwise.py)."""
    with one_by_one():
        if ext is None:
            yield
            return
        mx.synchronize()
        ext.use_int8_rows(rows)
        try:
            yield
        finally:
            ext.use_int8_rows(0)


def block(inputs: list[int], drafts: list[list[int]]) -> list[list[int]]:
    """Each row's input and draft, right-padded (with token 0) to the longest."""
    width = 1 + max(len(d) for d in drafts)
    return [[x, *d] + [0] * (width - 1 - len(d)) for x, d in zip(inputs, drafts, strict=True)]


def kept(sampled: list[int], draft: list[int]) -> int:
    """How many draft tokens the model's own tokens at those positions confirm."""
    n = 0
    while n < len(draft) and sampled[n] == draft[n]:
        n += 1
    return n


def roll_back(cache: list[Any], drops: list[int], orders: list[list[int] | None]) -> None:
    """Drops each row's last `drops[i]` positions: the common part from the end of every row
    (trim); a row that drops `e` more gets its first `e` positions copied into those `e` slots
    and its left padding grown by `e`. Attention does not depend on the order of the keys (each
    already carries its RoPE position), so this costs `e` positions a layer where rolling the
    row right (mlx-lm's right padding) copied its whole cache: 70 ms a step at 3k tokens.
    `orders[i]`: row i's positions in physical order as indices of its tokens (None: in order),
    kept up to date here so that `in_order` can give the prefix cache the tokens' order.
    Only the layers that drop positions take part (rewind.py has the others)."""
    cache = cut_layers(cache)
    if not cache:
        return
    common = min(drops)
    extra = [d - common for d in drops]
    for layer in cache:
        if common:
            layer.trim(common)
    for order in orders:
        if order is not None and common:
            del order[len(order) - common :]
    if not any(extra):
        return
    pads = cache[0].left_padding.tolist()
    end = cache[0]._idx
    if any(e and end - e - pads[i] < e for i, e in enumerate(extra)):
        _roll(cache, extra, orders)  # a row holding fewer tokens than it drops
        return
    moves = [
        (array, i, pads[i], end - e, e)
        for layer in cache
        for array in _arrays(layer)
        for i, e in enumerate(extra)
        if e
    ]
    # The first positions copied out (and evaluated) before any is written: each write then
    # updates its buffer in place, where one reading its own array would copy all of it.
    parts = [mx.contiguous(a[i : i + 1, :, s : s + n]) for a, i, s, _, n in moves]
    mx.eval(parts)
    for (array, i, _, target, n), part in zip(moves, parts, strict=True):
        array[i : i + 1, :, target : target + n] = part
    for layer in cache:
        layer.left_padding = layer.left_padding + mx.array(extra)
        layer.offset = layer.offset - mx.array(extra)
    for i, e in enumerate(extra):
        if e:
            order = orders[i] if orders[i] is not None else list(range(end - pads[i]))
            orders[i] = order[e : len(order) - e] + order[:e]


def _roll(cache: list[Any], extra: list[int], orders: list[list[int] | None]) -> None:
    """mlx-lm's way: each row rolled right by what it drops (a copy of the whole cache)."""
    for layer in cache:
        layer.prepare(right_padding=extra)
        layer.finalize()
    for i, e in enumerate(extra):
        if e and orders[i] is not None:
            del orders[i][len(orders[i]) - e :]


def _arrays(layer: Any) -> list[mx.array]:
    """A layer's K/V arrays: two, or six for quantized K/V (packed values, scales, biases)."""
    out = []
    for stored in (layer.keys, layer.values):
        out.extend(stored if isinstance(stored, tuple) else (stored,))
    return out


def appended(orders: list[list[int] | None], n: int) -> None:
    """Rows that were moved keep their order up to date as a step stores `n` positions after
    them (a verification's rejected ones leave again in roll_back)."""
    for order in orders:
        if order is not None:
            order.extend(range(len(order), len(order) + n))


def in_order(batch: list[Any], layers: list[Any], order: list[int] | None) -> list[Any]:
    """One row's caches extracted from `batch` (positions in physical order) back in its
    tokens' order: the layers roll_back moved positions in."""
    if order is None:
        return layers
    where = mx.array(sorted(range(len(order)), key=order.__getitem__))
    for source, layer in zip(leaves(batch), leaves(layers), strict=True):
        if not isinstance(source, CUT):
            continue
        for name in ("keys", "values"):
            stored = getattr(layer, name)
            if isinstance(stored, tuple):
                setattr(layer, name, tuple(mx.take(a, where, axis=2) for a in stored))
            else:
                setattr(layer, name, mx.take(stored, where, axis=2))
    return layers
