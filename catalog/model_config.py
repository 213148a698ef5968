"""What a model's own config.json says about the context it was made for: the catalog refuses a
longer context than that, and the admin shows it as the context box's placeholder."""

from __future__ import annotations

import json
from pathlib import Path

from inference.engine.vocabulary import chunk_context_limit, position_fields


def read_config(folder: Path) -> dict | None:
    """The folder's config.json as a dict; None when there is none or it does not parse (the
    loader says what is wrong with it)."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def own_context(config: dict) -> int | None:
    """The longest context the model serves: its trained positions (stretched by a RoPE
    scaling factor when its config has one), never past Llama 4's first attention chunk; None
    when the config names none."""
    chunk = chunk_context_limit(config)
    for source, positions in position_fields(config):
        if not isinstance(positions, bool) and positions > 0:
            limit = max(positions, scaled_positions(source))
            return min(limit, chunk) if chunk else limit
    return chunk


def scaled_positions(config: dict) -> int:
    """YaRN and its kin: the original positions times the factor (0 without a scaling)."""
    scaling = config.get("rope_scaling")
    if not isinstance(scaling, dict):
        return 0
    factor = scaling.get("factor")
    original = scaling.get("original_max_position_embeddings")
    if not isinstance(factor, int | float) or not isinstance(original, int):
        return 0
    return int(original * factor)
