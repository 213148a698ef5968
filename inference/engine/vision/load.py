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

from inference.engine.types import EngineError, ErrorKind
from inference.engine.vision.model import VisionChatModel

MROPE_FAMILIES = {
    "qwen2_vl": "Qwen2-VL",
    "qwen2_5_vl": "Qwen2.5-VL",
    "qwen3_vl": "Qwen3-VL",
    "qwen3_vl_moe": "Qwen3-VL-MoE",
}


def load_vision(location: str) -> tuple[VisionChatModel, Any, dict]:
    """(model, tokenizer, config.json) for the mlx-vlm model at `location` (never the hub)."""
    from mlx_vlm.utils import load as mlx_vlm_load

    path = Path(location)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{location} has no config.json")
    config = json.loads((path / "config.json").read_text())
    if config.get("model_type") in MROPE_FAMILIES:
        # Their positions are 3-D (M-RoPE) and depend on the images: the batched engine's 1-D
        # positions would read them wrongly, so they are refused rather than served badly.
        family = MROPE_FAMILIES[config["model_type"]]
        raise EngineError(
            ErrorKind.MODEL_UNAVAILABLE,
            f"{family}'s 3-D (M-RoPE) image positions are not supported yet by this engine",
        )
    vlm, processor = mlx_vlm_load(str(path))
    text_config = config.get("text_config") or {}
    for key in ("max_position_embeddings", "max_sequence_length"):
        if key not in config and isinstance(text_config.get(key), int):
            config[key] = text_config[key]
    eos = config.get("eos_token_id", text_config.get("eos_token_id"))
    tokenizer = load_tokenizer(path, eos_token_ids=eos)
    return VisionChatModel(vlm, processor), tokenizer, config
