"""A chat prompt with images, rendered for a vision model: the chat template's text with the
images' placeholders, the processor's token ids (image tokens expanded) and the prompt's input
embeddings (the vision tower's features in the image tokens' places). Engine thread only."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np
from jinja2 import TemplateError

from inference.engine.types import ChatPrompt, EngineError, ErrorKind
from inference.engine.vision.model import VisionChatModel

_TEMPLATE_ONLY = ("chat_template", "tools", "add_generation_prompt", "tokenize")


def template_text(adapter: Any, tokenizer: Any, prompt: ChatPrompt) -> str:
    template = adapter.profile.chat_template or None
    extra = {k: v for k, v in (prompt.template_kwargs or {}).items() if k not in _TEMPLATE_ONLY}
    if prompt.tools:
        extra["tools"] = prompt.tools
    try:
        text = tokenizer.apply_chat_template(
            prompt.messages,
            chat_template=template,
            add_generation_prompt=True,
            tokenize=False,
            **extra,
        )
    except TemplateError as exc:
        message = f"The model's chat template could not render this request: {exc}"
        raise EngineError(ErrorKind.INVALID_REQUEST, message, "messages") from exc
    return text + prompt.prefill


def processed(
    adapter: Any, tokenizer: Any, model: VisionChatModel, prompt: ChatPrompt
) -> tuple[list[int], dict[str, mx.array]]:
    """(prompt token ids, the processor's arrays) for a prompt with images."""
    text = template_text(adapter, tokenizer, prompt)
    try:
        inputs = model.processor(text=[text], images=list(prompt.images))
    except (ValueError, TypeError, IndexError) as exc:
        message = f"The model's processor could not read these images with this prompt: {exc}"
        raise EngineError(ErrorKind.INVALID_REQUEST, message, "messages") from exc
    arrays = {k: mx.array(np.asarray(v)) for k, v in inputs.items() if v is not None}
    return [int(t) for t in np.asarray(inputs["input_ids"])[0]], arrays


def render_with_images(
    adapter: Any, tokenizer: Any, model: VisionChatModel, prompt: ChatPrompt
) -> tuple[list[int], mx.array]:
    """(prompt token ids, input embeddings (length, hidden)) for a prompt with images."""
    ids, arrays = processed(adapter, tokenizer, model, prompt)
    input_ids, pixel_values = arrays.pop("input_ids"), arrays.pop("pixel_values")
    try:
        embeddings = model.embed_prompt(input_ids, pixel_values, **arrays)
    except (ValueError, TypeError, IndexError) as exc:
        message = f"The model could not read these images with this prompt: {exc}"
        raise EngineError(ErrorKind.INVALID_REQUEST, message, "messages") from exc
    if embeddings.shape[0] != len(ids):
        raise EngineError(ErrorKind.INTERNAL, "image embeddings do not match the prompt")
    return ids, embeddings
