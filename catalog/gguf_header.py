"""A GGUF file's quantization, read off the first few kilobytes of its header.

gguf's GGUFReader parses every field, vocabulary included (seconds for one file); listing a
folder of models only needs `general.file_type`, which llama.cpp writes before the tokenizer.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import BinaryIO

# Sizes of GGUF's scalar value types, by type number (8: string, 9: array are read apart).
_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
# Quantization as model files name it: Q4_K_M, Q8_0, IQ4_XS, F16, BF16...
_IN_NAME = re.compile(r"(?:^|[-_.])(I?Q\d(?:_[A-Z0-9]+)*|BF16|FP?16|FP?32)$", re.IGNORECASE)


def quantization_from_name(filename: str) -> str | None:
    """The quantization a file name states, e.g. 'Llama-3.2-1B-Instruct-Q4_K_M.gguf': Q4_K_M."""
    stem = re.sub(r"-\d{5}-of-\d{5}$", "", Path(filename).stem)
    match = _IN_NAME.search(stem)
    return match[1].upper().replace("FP", "F") if match else None


def quantization_from_header(path: Path) -> str | None:
    """`general.file_type` as llama.cpp names it (Q4_1, F16...); None when the header lacks it
    (it is optional) or is not a GGUF header."""
    try:
        with path.open("rb") as file:
            file_type = _find_file_type(file)
    except (OSError, struct.error, UnicodeDecodeError, ValueError):
        return None
    if file_type is None:
        return None
    from gguf import LlamaFileType

    try:
        name = LlamaFileType(file_type).name
    except ValueError:
        return None
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


def _find_file_type(file: BinaryIO) -> int | None:
    if file.read(4) != b"GGUF":
        return None
    (version,) = struct.unpack("<I", file.read(4))
    if version < 2:  # version 1 used 32-bit counts; no model of that age is worth listing
        return None
    _tensors, fields = struct.unpack("<QQ", file.read(16))
    for _ in range(fields):
        key = _string(file)
        (kind,) = struct.unpack("<I", file.read(4))
        if key == "general.file_type" and kind in (4, 5):
            return struct.unpack("<i" if kind == 5 else "<I", file.read(4))[0]
        if key.startswith("tokenizer."):  # past the general fields: stop before the vocabulary
            return None
        _skip(file, kind)
    return None


def _string(file: BinaryIO) -> str:
    (length,) = struct.unpack("<Q", file.read(8))
    if length > 1 << 20:
        raise ValueError("implausible string length: not a GGUF header")
    return file.read(length).decode()


def _skip(file: BinaryIO, kind: int) -> None:
    if kind == _STRING:
        _string(file)
    elif kind == _ARRAY:
        item_kind, count = struct.unpack("<IQ", file.read(12))
        for _ in range(count):
            _skip(file, item_kind)
    elif kind in _SCALAR_SIZES:
        file.seek(_SCALAR_SIZES[kind], 1)
    else:
        raise ValueError(f"unknown GGUF value type {kind}")
