"""One prefix-cache entry as a file: the token ids and each cache layer's class and state.

    magic (8) | header length (u32) | xxh3-128 of header + payload (16) | header (JSON) | payload

The header names each layer's class (module path) and its `state` as a tree whose arrays point
into the payload: any cache class that rebuilds itself with `from_state` (mlx-lm's, the
engine's own float16 and quantized ones, nested tuples as quantized KV's (packed, scales,
biases)) is stored without knowing its layout. The checksum covers everything after itself, so
a flipped bit, a truncated write or a file of another format is refused as a whole
(`Unreadable`), never half-read into a cache.

`prepare` runs on the engine thread and only evaluates views (no copy); `write` and the
checksum run on the prefix store's writer thread; `read` runs where a prompt needs the entry.
"""

from __future__ import annotations

import copy
import importlib
import json
import mmap
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import xxhash
from mlx.utils import tree_map
from mlx_lm.models.cache import CacheList, KVCache, QuantizedKVCache, _BaseCache

MAGIC = b"MLXKVC\x00\x01"
PREAMBLE = len(MAGIC) + 4 + 16
TOKENS = "<u4"  # token ids as stored and hashed
# Only cache classes from here are rebuilt: a file never names arbitrary code to import.
TRUSTED_MODULES = ("mlx_lm.models.", "inference.engine.")


class Unreadable(Exception):
    """The file is not a whole, intact entry for what was asked."""


@dataclass
class Prepared:
    """An entry ready to write: its header and its arrays (views of evaluated MLX arrays)."""

    header: dict
    arrays: list[np.ndarray]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)


def token_bytes(tokens: list[int]) -> bytes:
    return np.asarray(tokens, dtype=TOKENS).tobytes()


def token_digest(tokens: list[int]) -> str:
    return xxhash.xxh3_128_hexdigest(token_bytes(tokens))


def _trimmed(layer: Any) -> Any:
    """The layer with its KV cut to the tokens it holds: KVCache grows in steps of 256, and a
    file need not keep the unused tail."""
    if isinstance(layer, CacheList):
        twin = copy.copy(layer)
        twin.caches = tuple(_trimmed(c) for c in layer.caches)
        return twin
    if isinstance(layer, (KVCache, QuantizedKVCache)) and layer.keys is not None:
        end = layer.offset
        twin = copy.copy(layer)
        twin.keys = tree_map(lambda x: x[..., :end, :], layer.keys)
        twin.values = tree_map(lambda x: x[..., :end, :], layer.values)
        return twin
    return layer


def _flatten(value: Any, arrays: list[mx.array]) -> Any:
    """A state tree as JSON, its arrays replaced by their index in `arrays`."""
    if isinstance(value, mx.array):
        arrays.append(value)
        return {"a": len(arrays) - 1}
    if isinstance(value, tuple):
        return {"t": [_flatten(v, arrays) for v in value]}
    if isinstance(value, list):
        return {"l": [_flatten(v, arrays) for v in value]}
    if isinstance(value, dict):
        return {"d": {k: _flatten(v, arrays) for k, v in value.items()}}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"a cache state holds a {type(value).__name__}")


def _unflatten(node: Any, arrays: list[mx.array]) -> Any:
    if isinstance(node, dict):
        if "a" in node:
            return arrays[node["a"]]
        if "t" in node:
            return tuple(_unflatten(v, arrays) for v in node["t"])
        if "l" in node:
            return [_unflatten(v, arrays) for v in node["l"]]
        return {k: _unflatten(v, arrays) for k, v in node["d"].items()}
    return node


def _class_path(layer: Any) -> str:
    kind = type(layer)
    return f"{kind.__module__}.{kind.__qualname__}"


def _stored(array: mx.array) -> mx.array:
    # bfloat16 has no numpy (nor buffer protocol) type: kept as its bits.
    return array.view(mx.uint16) if array.dtype == mx.bfloat16 else array


def prepare(tokens: list[int], cache: list[Any]) -> Prepared:
    """Engine thread: the entry's header and zero-copy views of its evaluated arrays."""
    arrays: list[mx.array] = [mx.array(np.asarray(tokens, dtype=TOKENS))]
    layers = []
    for layer in cache:
        trimmed = _trimmed(layer)
        record = {"class": _class_path(layer), "state": _flatten(trimmed.state, arrays)}
        meta = getattr(layer, "meta_state", None)
        if meta:
            record["meta"] = _flatten(meta, arrays)
        layers.append(record)
    stored = [_stored(a) for a in arrays]
    mx.eval(stored)
    table = [{"dtype": str(a.dtype).rsplit(".", 1)[-1], "shape": list(a.shape)} for a in arrays]
    views = [np.asarray(a) for a in stored]
    for entry, view in zip(table, views, strict=True):
        entry["nbytes"] = view.nbytes
    header = {"tokens": len(tokens), "layers": layers, "arrays": table}
    return Prepared(header, views)


def write(path: Path, prepared: Prepared, pause: Callable[[], None] = lambda: None) -> int:
    """Writes the entry at `path` (owner-only), whole or not at all: into a temporary file in
    the same folder, renamed over `path` once complete; `pause()` before each array (a
    layer's keys or values) may hold the writing up. Returns the file's size."""
    header = json.dumps({**prepared.header, "payload": prepared.nbytes}).encode()
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(MAGIC + struct.pack("<I", len(header)) + bytes(16) + header)
            digest = xxhash.xxh3_128(header)
            for array in prepared.arrays:
                pause()
                for block in _blocks(array):
                    data = memoryview(block).cast("B")
                    digest.update(data)
                    out.write(data)
            out.seek(len(MAGIC) + 4)
            out.write(digest.digest())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return PREAMBLE + len(header) + prepared.nbytes


def _blocks(array: np.ndarray) -> Iterator[np.ndarray]:
    """The array's bytes in order as contiguous pieces, without copying it whole: a KV view
    cut to its tokens is contiguous per head (the tokens of one head follow each other)."""
    if array.flags.c_contiguous:
        yield array
    elif array.ndim > 2:
        for part in array:
            yield from _blocks(part)
    else:
        yield np.ascontiguousarray(array)


def read(path: Path, tokens: list[int]) -> list[Any]:
    """The cache layers stored at `path`, checked whole against its checksum and against
    `tokens` (the prefix the caller looked up). Raises Unreadable (or OSError)."""
    with open(path, "rb") as source:
        size = os.fstat(source.fileno()).st_size
        if size < PREAMBLE:
            raise Unreadable("shorter than its preamble")
        mapped = mmap.mmap(source.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        return _decode(mapped, size, tokens)
    finally:
        mapped.close()


def _decode(mapped: mmap.mmap, size: int, tokens: list[int]) -> list[Any]:
    if mapped[: len(MAGIC)] != MAGIC:
        raise Unreadable("not a prefix-cache entry")
    (length,) = struct.unpack("<I", mapped[len(MAGIC) : len(MAGIC) + 4])
    try:
        header = json.loads(mapped[PREAMBLE : PREAMBLE + length])
        payload = int(header["payload"])
    except (ValueError, KeyError, TypeError) as exc:
        raise Unreadable(f"header unreadable: {exc}") from None
    if size != PREAMBLE + length + payload:
        raise Unreadable(f"{size} bytes, expected {PREAMBLE + length + payload} (truncated?)")
    with memoryview(mapped) as whole:
        if xxhash.xxh3_128_digest(whole[PREAMBLE:]) != mapped[len(MAGIC) + 4 : PREAMBLE]:
            raise Unreadable("checksum mismatch")
    try:
        arrays = _arrays(mapped, PREAMBLE + length, header["arrays"])
        if header["tokens"] != len(tokens) or arrays[0].tolist() != list(tokens):
            raise Unreadable("holds another prefix")
        return [_layer(record, arrays) for record in header["layers"]]
    except Unreadable:
        raise
    except Exception as exc:  # a checksummed header we cannot rebuild from: another version
        raise Unreadable(f"cannot rebuild its cache: {exc!r}") from None


def _arrays(mapped: mmap.mmap, offset: int, table: list[dict]) -> list[mx.array]:
    """Each array copied out of the mapped file into MLX memory (the map closes after)."""
    arrays = []
    for entry in table:
        dtype = getattr(mx, entry["dtype"])
        stored = np.uint16 if dtype == mx.bfloat16 else np.dtype(entry["dtype"])
        count = int(np.prod(entry["shape"], dtype=np.int64))
        view = np.frombuffer(mapped, dtype=stored, count=count, offset=offset)
        array = mx.array(view.reshape(entry["shape"]))
        del view  # the map cannot close while a view of it lives
        arrays.append(array.view(mx.bfloat16) if dtype == mx.bfloat16 else array)
        offset += entry["nbytes"]
    mx.eval(arrays)
    return arrays


def _layer(record: dict, arrays: list[mx.array]) -> Any:
    module, _, name = record["class"].rpartition(".")
    if not module.startswith(TRUSTED_MODULES):
        raise Unreadable(f"names an untrusted class {record['class']}")
    kind = getattr(importlib.import_module(module), name)
    if not (isinstance(kind, type) and issubclass(kind, _BaseCache)):
        raise Unreadable(f"{record['class']} is not a cache class")
    layer = kind.from_state(_unflatten(record["state"], arrays))
    if "meta" in record:
        layer.meta_state = _unflatten(record["meta"], arrays)
    return layer
