"""Which family a catalog model belongs to when the admin did not say."""

from __future__ import annotations

import json
from pathlib import Path

from catalog.models import CatalogModel, ModelFamily


def local_model_type(entry: CatalogModel) -> str | None:
    """config.json's model_type for models on disk; None for hub repos not yet fetched."""
    if entry.source == CatalogModel.Source.HUGGING_FACE:
        return None
    try:
        config = json.loads((Path(entry.location) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    model_type = config.get("model_type")
    return model_type if isinstance(model_type, str) else None


def detect_family(entry: CatalogModel, families: list[ModelFamily]) -> ModelFamily | None:
    """Name patterns first (they can tell Qwen from Llama), then config's model_type."""
    if entry.family_id is not None:
        return entry.family
    names = (entry.public_id, entry.display_name, entry.location)
    for family in families:
        if family.matches_name(*names):
            return family
    model_type = local_model_type(entry)
    if model_type:
        for family in families:
            if model_type in family.model_types:
                return family
    return next((f for f in families if f.slug == "default"), None)
