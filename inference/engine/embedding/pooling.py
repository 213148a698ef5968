"""One vector per input from a batch's hidden states: which token(s) to read, and L2 norm."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx

POOLINGS = ("last", "mean", "cls")

# sentence-transformers' 1_Pooling/config.json flags, in the order they are honoured.
_FOLDER_FLAGS = (
    ("pooling_mode_lasttoken", "last"),
    ("pooling_mode_cls_token", "cls"),
    ("pooling_mode_mean_tokens", "mean"),
)


def folder_pooling(folder: Path) -> str | None:
    """The pooling a sentence-transformers folder declares, or None without one."""
    path = folder / "1_Pooling" / "config.json"
    if not path.is_file():
        return None
    flags = json.loads(path.read_text())
    for key, mode in _FOLDER_FLAGS:
        if flags.get(key):
            return mode
    return None


def pool(hidden: mx.array, lengths: mx.array, mode: str) -> mx.array:
    """(batch, dimension) float32 from right-padded `hidden` (batch, length, dimension), where
    row i holds lengths[i] real tokens: pads are never read."""
    hidden = hidden.astype(mx.float32)
    if mode == "cls":
        return hidden[:, 0, :]
    if mode == "last":
        rows = mx.arange(hidden.shape[0])
        return hidden[rows, lengths - 1, :]
    positions = mx.arange(hidden.shape[1])[None, :]
    mask = (positions < lengths[:, None]).astype(mx.float32)[..., None]
    return (hidden * mask).sum(axis=1) / lengths[:, None].astype(mx.float32)


def l2_normalize(vectors: mx.array) -> mx.array:
    norms = mx.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / mx.maximum(norms, 1e-12)
