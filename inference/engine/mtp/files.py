"""Whether a model folder ships an MTP head this server reads, from its config and weight files'
headers alone (no MLX, no weights read): what the catalog checks where `speculative: mtp` is
set, and what add_model chooses its default by."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from inference.engine.mtp.families import Family, family_of


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
    args = SimpleNamespace(**config.get("text_config", config))
    return heads_in(config, set(keys), args)[2]


def heads_in(config: dict, keys: set[str], args: Any) -> tuple[Family | None, int, str]:
    """(the model's family layout, how many heads the weight files' `keys` hold, why none:
    "" when there is one); `args`: the text model's config as attributes."""
    model_type = config.get("model_type", "")
    family = family_of(model_type)
    if family is None:
        return None, 0, f"{model_type or 'this'} models ship no MTP head this server reads"
    layers = family.layers(keys, args)
    if not layers:
        return family, 0, "its weight files hold no MTP head (converters to MLX drop them)"
    return family, layers, ""
