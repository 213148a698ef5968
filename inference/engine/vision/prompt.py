"""A prompt with images, read by a vision model: serving rendered the chat template's text
with the images' placeholders (serving/prepare.py); here the processor gives its token ids
(image tokens expanded), and the model its input embeddings (the vision tower's features in
the image tokens' places). Engine thread only."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from inference.engine.types import EngineError, ErrorKind, ImagePrompt
from inference.engine.vision.model import VisionChatModel


def processed(prompt: ImagePrompt, model: VisionChatModel) -> tuple[list[int], dict[str, mx.array]]:
    """(prompt token ids, the processor's arrays) for a prompt with images."""
    try:
        inputs = model.processor(text=[prompt.text], images=list(prompt.images))
    except (ValueError, TypeError, IndexError) as exc:
        message = f"The model's processor could not read these images with this prompt: {exc}"
        raise EngineError(ErrorKind.INVALID_REQUEST, message, "messages") from exc
    arrays = {k: mx.array(np.asarray(v)) for k, v in inputs.items() if v is not None}
    return [int(t) for t in np.asarray(inputs["input_ids"])[0]], arrays


def render_with_images(prompt: ImagePrompt, model: VisionChatModel) -> tuple[list[int], mx.array]:
    """(prompt token ids, input embeddings (length, hidden)) for a prompt with images."""
    ids, arrays = processed(prompt, model)
    input_ids, pixel_values = arrays.pop("input_ids"), arrays.pop("pixel_values")
    try:
        embeddings = model.embed_prompt(input_ids, pixel_values, **arrays)
    except (ValueError, TypeError, IndexError) as exc:
        message = f"The model could not read these images with this prompt: {exc}"
        raise EngineError(ErrorKind.INVALID_REQUEST, message, "messages") from exc
    if embeddings.shape[0] != len(ids):
        raise EngineError(ErrorKind.INTERNAL, "image embeddings do not match the prompt")
    return ids, embeddings
