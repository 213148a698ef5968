"""Reading a GGUF file: its metadata as plain Python values and its tensors row block by row
block, with ordinary reads rather than a memory map, so pages read are not kept in the
process's resident memory once a tensor is converted."""

from __future__ import annotations

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


def open_gguf(path: Path) -> GGUFFile:
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)
    except Exception as exc:
        raise UnsupportedGGUF(f"{path} is not a readable GGUF file: {exc}") from exc
    metadata = {
        key: field.contents() for key, field in reader.fields.items() if not key.startswith("GGUF.")
    }
    tensors = [
        TensorInfo(
            name=t.name,
            type_name=t.tensor_type.name,
            shape=tuple(int(d) for d in reversed(t.shape.tolist())),
            offset=int(t.data_offset),
            n_bytes=int(t.n_bytes),
        )
        for t in reader.tensors
    ]
    del reader  # drops its memory map
    return GGUFFile(Path(path), metadata, tensors)


def read_metadata(path: Path) -> dict:
    return open_gguf(path).metadata


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
