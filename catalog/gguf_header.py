"""A GGUF file's quantization, from its name or the start of its header.

Listing a folder of models only needs `general.file_type`: the header is read for that key
alone, the vocabulary skipped unparsed.
"""

from __future__ import annotations

import re
from pathlib import Path

from inference.conversion.gguf_file import read_fields

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
    from gguf import LlamaFileType

    file_type = read_fields(path, {"general.file_type"}).get("general.file_type")
    if not isinstance(file_type, int):
        return None
    try:
        name = LlamaFileType(file_type).name
    except ValueError:
        return None
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")
