"""A vision-language model seen as an mlx-lm chat model, so the text engine drives it as is.

`VisionChatModel(inputs, cache=...)` returns the language model's logits, `.model` is the
language model's layers (what prefill runs), `.layers` its blocks (what make_prompt_cache reads).
`.vlm` is mlx-vlm's whole model (vision tower, projector, language model) and `.processor` its
processor: they turn a prompt with images into input embeddings, once, on the engine thread.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn


class VisionChatModel(nn.Module):
    def __init__(self, vlm: nn.Module, processor: Any) -> None:
        super().__init__()
        self.vlm = vlm
        self.processor = processor

    @property
    def model(self) -> nn.Module:
        # Idefics3 / SmolVLM: the language model is itself the layers (it has no inner .model).
        language_model = self.vlm.language_model
        return getattr(language_model, "model", language_model)

    @property
    def layers(self) -> list[nn.Module]:
        return self.vlm.language_model.layers

    def __call__(self, inputs: mx.array, cache: list[Any] | None = None) -> mx.array:
        out = self.vlm.language_model(inputs, cache=cache)
        return getattr(out, "logits", out)

    def read_embeddings(self, tokens: mx.array, embeddings: mx.array, cache: list[Any]) -> None:
        """Runs the layers over `embeddings` (batch, length, hidden) in place of tokens."""
        self.model(tokens, inputs_embeds=embeddings, cache=cache)

    def embed_prompt(self, input_ids: mx.array, pixel_values: mx.array, **extra: Any) -> mx.array:
        """The prompt's input embeddings (length, hidden): text tokens' and image features."""
        if "attention_mask" in extra:  # Gemma 3 reads the processor's mask as `mask`
            extra.setdefault("mask", extra["attention_mask"])
        features = self.vlm.get_input_embeddings(input_ids, pixel_values, **extra)
        embeddings = getattr(features, "inputs_embeds", features)
        mx.eval(embeddings)
        return embeddings[0]
