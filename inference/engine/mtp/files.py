"""Whether a model folder ships an MTP head this server reads, from its config and weight files'
headers alone (no MLX, no weights read): what the catalog checks where `speculative: mtp` is
set, and what add_model chooses its default by."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from types import SimpleNamespace

from inference.engine.mtp.families import family_of


def checkpoint_keys(folder: Path) -> dict[str, Path]:
    """Every tensor name in the folder's weight files, with its file (headers only)."""
    found: dict[str, Path] = {}
    for file in sorted(folder.glob("model*.safetensors")):
        with file.open("rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        found.update((key, file) for key in header if key != "__metadata__")
    return found


def missing_heads(folder: Path) -> str:
    """Why the folder's model has no MTP head to draft with ("" when it has one)."""
    try:
        config = json.loads((folder / "config.json").read_text())
        keys = checkpoint_keys(folder)
    except (OSError, ValueError, struct.error) as exc:
        return f"its files cannot be read ({exc})"
    model_type = config.get("model_type", "")
    family = family_of(model_type)
    if family is None:
        return f"{model_type or 'this'} models ship no MTP head this server reads"
    args = SimpleNamespace(**config.get("text_config", config))
    if not family.layers(set(keys), args):
        return "its weight files hold no MTP head (converters to MLX drop them)"
    return ""
