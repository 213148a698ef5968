"""Every architecture import_gguf reads, collected from the modules of their families
(gguf_llama, gguf_qwen, gguf_gemma, gguf_moe, gguf_hybrid, and those kept apart: gguf_qwen35,
gguf_gemma4, gguf_llama4), which build on each other, so the registry sits above them all."""

from __future__ import annotations

from inference.conversion.gguf_architecture import Architecture
from inference.conversion.gguf_file import GGUFFile, UnsupportedGGUF
from inference.conversion.gguf_gemma import GEMMA_ARCHITECTURES
from inference.conversion.gguf_gemma4 import GEMMA4_ARCHITECTURES
from inference.conversion.gguf_hybrid import HYBRID_ARCHITECTURES
from inference.conversion.gguf_llama import LLAMA_ARCHITECTURES
from inference.conversion.gguf_llama4 import LLAMA4_ARCHITECTURES
from inference.conversion.gguf_moe import MOE_ARCHITECTURES
from inference.conversion.gguf_qwen import QWEN_ARCHITECTURES
from inference.conversion.gguf_qwen35 import QWEN35_ARCHITECTURES

_FAMILIES: tuple[dict[str, Architecture], ...] = (
    LLAMA_ARCHITECTURES,
    QWEN_ARCHITECTURES,
    MOE_ARCHITECTURES,
    HYBRID_ARCHITECTURES,
    GEMMA_ARCHITECTURES,
    QWEN35_ARCHITECTURES,
    GEMMA4_ARCHITECTURES,
    LLAMA4_ARCHITECTURES,
)


def _collected(families: tuple[dict[str, Architecture], ...]) -> dict[str, Architecture]:
    """One dict of them all; a GGUF name two families claim is a mistake, not an override."""
    merged: dict[str, Architecture] = {}
    for family in families:
        twice = merged.keys() & family.keys()
        if twice:
            raise RuntimeError(f"GGUF architectures registered twice: {', '.join(sorted(twice))}")
        merged |= family
    return merged


ARCHITECTURES: dict[str, Architecture] = _collected(_FAMILIES)


def architecture_of(file: GGUFFile) -> Architecture:
    name = file.metadata.get("general.architecture")
    if name not in ARCHITECTURES:
        raise UnsupportedGGUF(
            f"architecture {name!r} is not supported "
            f"(supported: {', '.join(sorted(ARCHITECTURES))}; Mistral's files use 'llama')"
        )
    return ARCHITECTURES[name]
