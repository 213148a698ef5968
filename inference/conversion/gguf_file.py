"""Reading a GGUF file: its metadata as plain Python values and its tensors row block by row
block, with ordinary reads rather than a memory map, so pages read are not kept in the
process's resident memory once a tensor is converted."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np


class UnsupportedGGUF(ValueError):
    """The file uses something the importer cannot convert faithfully."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    type_name: str  # GGMLQuantizationType name: "Q4_K", "F16", ...
    shape: tuple[int, ...]  # numpy order: (rows, ..., columns)
    offset: int  # of its data in the file
    n_bytes: int

    @property
    def rows(self) -> int:
        return int(np.prod(self.shape[:-1], dtype=np.int64)) if len(self.shape) > 1 else 1

    @property
    def columns(self) -> int:
        return self.shape[-1]


@dataclass(frozen=True)
class GGUFFile:
    path: Path
    metadata: dict
    tensors: list[TensorInfo]

    def tensor(self, name: str) -> TensorInfo | None:
        return next((t for t in self.tensors if t.name == name), None)


def open_gguf(path: Path, complete: bool = True) -> GGUFFile:
    """The header, parsed here rather than by gguf's GGUFReader, which builds a numpy view per
    vocabulary string: ~170 MB at its peak for a 49k-token vocabulary, more than the import.
    `complete`: the file must also hold every tensor's bytes (not for a look at metadata)."""
    try:
        with open(path, "rb") as file:
            parsed = _parse(Path(path), _Cursor(file))
        if complete:
            _check_complete(parsed.path, parsed.tensors)
        return parsed
    except (OSError, ValueError, KeyError, struct.error, UnicodeDecodeError) as exc:
        raise UnsupportedGGUF(f"{path} is not a readable GGUF file: {exc}") from exc


class _Cursor:
    def __init__(self, file) -> None:
        self.file = file

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        data = self.file.read(size)
        if len(data) != size:
            raise ValueError("the file ends inside its header")
        return struct.unpack(fmt, data)[0]

    def string(self) -> str:
        length = self.take("<Q")
        if length > 1 << 24:
            raise ValueError("implausible string length: not a GGUF header")
        return self.file.read(length).decode("utf-8")

    def skip(self, kind: int) -> None:
        if kind == _STRING:
            self.file.seek(self.take("<Q"), 1)
        elif kind == _ARRAY:
            item, count = self.take("<I"), self.take("<Q")
            if item in _SCALARS:
                self.file.seek(struct.calcsize(_SCALARS[item]) * count, 1)
            else:
                for _ in range(count):
                    self.skip(item)
        else:
            self.file.seek(struct.calcsize(_SCALARS[kind]), 1)

    def value(self, kind: int):
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, count = self.take("<I"), self.take("<Q")
            if item in _SCALARS:  # numbers in one read
                dtype = np.dtype(_SCALARS[item])
                return np.frombuffer(self.file.read(dtype.itemsize * count), dtype).tolist()
            return [self.value(item) for _ in range(count)]
        return self.take(_SCALARS[kind])


_STRING, _ARRAY = 8, 9
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?"}
_SCALARS |= {10: "<Q", 11: "<q", 12: "<d"}


def read_fields(path: Path, keys: set[str]) -> dict:
    """Only these metadata keys, the rest skipped unread (a vocabulary is 0.1-0.5 s to skip,
    seconds to parse): cheap enough to list a folder of models. llama-quantize writes
    general.file_type after the vocabulary, so stopping early would miss it. {} for a file that
    is not a readable GGUF."""
    try:
        with open(path, "rb") as file:
            cursor = _Cursor(file)
            if file.read(4) != b"GGUF" or cursor.take("<I") < 2:
                return {}
            cursor.take("<Q")  # tensor count
            return _values(cursor, cursor.take("<Q"), keys)
    except (OSError, ValueError, struct.error, UnicodeDecodeError):
        return {}


def _values(cursor: _Cursor, count: int, keys: set[str] | None = None) -> dict:
    metadata = {}
    for _ in range(count):
        key = cursor.string()
        kind = cursor.take("<I")
        if keys is None or key in keys:
            metadata[key] = cursor.value(kind)
        else:
            cursor.skip(kind)
    return metadata


def _parse(path: Path, cursor: _Cursor) -> GGUFFile:
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    if cursor.file.read(4) != b"GGUF":
        raise ValueError("no GGUF magic number")
    version = cursor.take("<I")
    if version < 2:
        raise ValueError(f"GGUF version {version} is too old")
    n_tensors, n_values = cursor.take("<Q"), cursor.take("<Q")
    metadata = _values(cursor, n_values)
    infos = []
    for _ in range(n_tensors):
        name = cursor.string()
        dims = [cursor.take("<Q") for _ in range(cursor.take("<I"))]
        kind, offset = GGMLQuantizationType(cursor.take("<I")), cursor.take("<Q")
        block, size = GGML_QUANT_SIZES[kind]
        n_bytes = int(np.prod(dims, dtype=np.int64)) // block * size
        infos.append((name, kind.name, tuple(reversed(dims)), offset, n_bytes))
    alignment = int(metadata.get("general.alignment", 32))
    start = -(-cursor.file.tell() // alignment) * alignment
    tensors = [TensorInfo(n, k, shape, start + o, b) for n, k, shape, o, b in infos]
    return GGUFFile(path, metadata, tensors)


def _check_complete(path: Path, tensors: list[TensorInfo]) -> None:
    """A file cut short (a download or copy that stopped) is said to be so here, in plain
    words, rather than surfacing later as a reshape error deep in a tensor's conversion."""
    size = path.stat().st_size
    needed = max((t.offset + t.n_bytes for t in tensors), default=0)
    if needed > size:
        raise ValueError(
            f"the file is cut short: its tensors need {needed:,} bytes but it holds {size:,} "
            "(an incomplete download or copy?)"
        )


def read_metadata(path: Path) -> dict:
    return open_gguf(path, complete=False).metadata


def read_rows(path: Path, tensor: TensorInfo, max_values: int = 1 << 21) -> Iterator[np.ndarray]:
    """The tensor's raw bytes as (rows, bytes per row) uint8 blocks of about max_values weights
    (the converter's temporaries are a few times that in float32)."""
    row_bytes = tensor.n_bytes // tensor.rows
    step = max(1, max_values // tensor.columns)
    with open(path, "rb") as file:
        for start in range(0, tensor.rows, step):
            count = min(step, tensor.rows - start)
            file.seek(tensor.offset + start * row_bytes)
            block = np.frombuffer(file.read(count * row_bytes), dtype=np.uint8)
            yield block.reshape(count, row_bytes)


def read_tensor_f32(path: Path, tensor: TensorInfo) -> np.ndarray:
    """A small float tensor (rope factors) whole, as float32."""
    dtypes = {"F32": np.float32, "F16": np.float16}
    if tensor.type_name not in dtypes:
        raise UnsupportedGGUF(f"{tensor.name} is {tensor.type_name}, expected F32 or F16")
    raw = np.concatenate([block.reshape(-1) for block in read_rows(path, tensor)])
    return raw.view(dtypes[tensor.type_name]).astype(np.float32).reshape(tensor.shape)
