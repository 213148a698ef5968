"""An MTP head, and the target model split so that a step gives its hidden states.

The head at position p reads the target's hidden state at p (what its output head turned into
the token at p + 1) and that token's embedding, and predicts the token at p + 2. Its block is
an attention layer with a KV cache of its own, one position per position it has read. A
chained guess feeds the head's own output as the next hidden state (families.Family).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.base import create_attention_mask

from inference.engine.mtp.families import Family


class MtpHead(nn.Module):
    def __init__(self, block: nn.Module, width: int, eps: float, family: Family) -> None:
        super().__init__()
        self.embed_norm = nn.RMSNorm(width, eps=eps)
        self.hidden_norm = nn.RMSNorm(width, eps=eps)
        self.proj = nn.Linear(2 * width, width, bias=False)
        self.block = block
        self.norm = nn.RMSNorm(width, eps=eps)
        self._embed_first = family.embed_first
        self._chain_normed = family.chain_normed

    def __call__(
        self, hidden: mx.array, embeddings: mx.array, cache: Any
    ) -> tuple[mx.array, mx.array]:
        """(what a chained guess feeds on as its hidden state, the output head's input), for
        `hidden` and `embeddings` of shape (1, L, width)."""
        e, h = self.embed_norm(embeddings), self.hidden_norm(hidden.astype(embeddings.dtype))
        x = self.proj(mx.concatenate([e, h] if self._embed_first else [h, e], axis=-1))
        x = self.block(x, create_attention_mask(x, cache, return_array=True), cache)
        out = self.norm(x)
        return (out if self._chain_normed else x), out


@dataclass
class Target:
    """The target model as its layer stack (`body`: tokens and cache to the final-normed
    hidden states), its output head and its token embedding."""

    body: Any
    head: Callable[[mx.array], mx.array]
    embed: Callable[[mx.array], mx.array]

    def __call__(self, tokens: mx.array, cache: Any) -> tuple[mx.array, mx.array]:
        """(logits, hidden states) of one forward: what model(tokens, cache) gives, and the
        hidden states it computed them from."""
        hidden = self.body(tokens, cache=cache)
        return self.head(hidden), hidden


def split(model: Any) -> Target | None:
    """The model's body and head as mlx-lm's text models hold them (None: another shape)."""
    holder = getattr(model, "language_model", model)
    body = getattr(holder, "model", None)
    embed = getattr(body, "embed_tokens", None)
    if body is None or embed is None:
        return None
    head = getattr(holder, "lm_head", None) or embed.as_linear
    return Target(body, head, embed)


@dataclass
class MtpHeads:
    """A loaded model's MTP head (the first its checkpoint holds: each guess chains on it, as
    vLLM and SGLang do with one), with the target it reads."""

    head: MtpHead
    target: Target
    family: str
    layers: int  # how many heads the checkpoint holds

    @property
    def width(self) -> int:
        """The model's hidden size (what the head's projection gives back)."""
        return self.head.proj.weight.shape[0]
