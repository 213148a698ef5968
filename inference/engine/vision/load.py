"""Loads a vision-language chat model from a local folder through mlx-vlm. Engine thread only.

The tokenizer is mlx-lm's wrapper over the same tokenizer files, so detokenizing, stop tokens
and token texts work as for any chat model; the processor (image preprocessing and the image
tokens' expansion) rides on the model (`VisionChatModel.processor`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlx_lm.utils import load_tokenizer

from inference.engine.vision.model import VisionChatModel


def load_vision(location: str) -> tuple[VisionChatModel, Any, dict]:
    """(model, tokenizer, config.json) for the mlx-vlm model at `location` (never the hub)."""
    from mlx_vlm.utils import load as mlx_vlm_load

    path = Path(location)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{location} has no config.json")
    vlm, processor = mlx_vlm_load(str(path))
    config = json.loads((path / "config.json").read_text())
    text_config = config.get("text_config") or {}
    for key in ("max_position_embeddings", "max_sequence_length"):
        if key not in config and isinstance(text_config.get(key), int):
            config[key] = text_config[key]
    eos = config.get("eos_token_id", text_config.get("eos_token_id"))
    tokenizer = load_tokenizer(path, eos_token_ids=eos)
    return VisionChatModel(vlm, processor), tokenizer, config
