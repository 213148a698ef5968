"""Every architecture import_gguf reads: gguf_architectures' families and those kept in modules
of their own (gguf_qwen35), which build on it, so the registry sits above them all."""

from __future__ import annotations

from inference.conversion.gguf_architectures import ARCHITECTURES as _BASE
from inference.conversion.gguf_architectures import Architecture
from inference.conversion.gguf_file import GGUFFile, UnsupportedGGUF
from inference.conversion.gguf_gemma4 import GEMMA4_ARCHITECTURES
from inference.conversion.gguf_llama4 import LLAMA4_ARCHITECTURES
from inference.conversion.gguf_qwen35 import QWEN35_ARCHITECTURES

ARCHITECTURES: dict[str, Architecture] = (
    _BASE | QWEN35_ARCHITECTURES | GEMMA4_ARCHITECTURES | LLAMA4_ARCHITECTURES
)


def architecture_of(file: GGUFFile) -> Architecture:
    name = file.metadata.get("general.architecture")
    if name not in ARCHITECTURES:
        raise UnsupportedGGUF(
            f"architecture {name!r} is not supported "
            f"(supported: {', '.join(sorted(ARCHITECTURES))}; Mistral's files use 'llama')"
        )
    return ARCHITECTURES[name]
