"""A safetensors file written piece by piece: the header (every tensor's dtype, shape and
place) first, then each block of rows at its offset, so no tensor is ever whole in memory.
mlx-lm reads it like any model.safetensors."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

DTYPES = {
    "int8": "I8",
    "uint8": "U8",
    "uint32": "U32",
    "float16": "F16",
    "bfloat16": "BF16",
    "float32": "F32",
}
ITEM_SIZE = {"int8": 1, "uint8": 1, "uint32": 4, "float16": 2, "bfloat16": 2, "float32": 4}


class SafetensorsOut:
    def __init__(self, path: Path, layout: dict[str, tuple[str, tuple[int, ...]]]) -> None:
        """layout: name -> (dtype name, shape), in the order the data is laid out."""
        header: dict = {"__metadata__": {"format": "mlx"}}
        self._places: dict[str, tuple[int, int]] = {}  # name -> (data start, bytes per row)
        offset = 0
        for name, (dtype, shape) in layout.items():
            size = int(np.prod(shape, dtype=np.int64)) * ITEM_SIZE[dtype]
            header[name] = {
                "dtype": DTYPES[dtype],
                "shape": list(shape),
                "data_offsets": [offset, offset + size],
            }
            row = ITEM_SIZE[dtype] * (shape[-1] if shape else 1)
            self._places[name] = (offset, row)
            offset += size
        encoded = json.dumps(header, separators=(",", ":")).encode()
        encoded += b" " * (-len(encoded) % 8)  # data starts 8-byte aligned
        self._base = 8 + len(encoded)
        self._file = open(path, "wb")  # noqa: SIM115 (closed in close())
        self._file.write(struct.pack("<Q", len(encoded)) + encoded)
        self._file.truncate(self._base + offset)
        self._expected = layout

    def write(self, name: str, first_row: int, array) -> None:
        """A block of rows (an mx.array) of `name`, starting at row `first_row`."""
        import mlx.core as mx

        dtype, shape = self._expected[name]
        if str(array.dtype).removeprefix("mlx.core.") != dtype or array.shape[-1] != (
            shape[-1] if shape else 1
        ):
            raise ValueError(f"{name}: wrote {array.dtype}{array.shape}, laid out {dtype}{shape}")
        if array.dtype == mx.bfloat16:
            array = array.view(mx.uint16)  # numpy has no bfloat16; the bytes are the same
        start, row_bytes = self._places[name]
        self._file.seek(self._base + start + first_row * row_bytes)
        self._file.write(np.array(array).tobytes())

    def close(self) -> None:
        self._file.close()
