"""Loading an embedding model: decoders through mlx-lm, encoders through mlx-embeddings.

Both come back as an `EmbeddingModel` (one `hidden(ids, mask)` whatever the architecture) and an
`EmbeddingTokenizer` (text to ids with the special tokens the model was trained with), so the
runner never asks which library read the weights. Engine thread only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from inference.engine import fastmath
from inference.engine.embedding.pooling import folder_pooling
from inference.engine.embedding.tokens import ENCODERS, EmbeddingTokenizer


class EmbeddingModel(nn.Module):
    """A loaded embedding model; its parameters are the wrapped model's, so the pool counts
    their bytes as for any model."""

    def __init__(self, inner: nn.Module, encoder: bool, default_pooling: str) -> None:
        super().__init__()
        self.inner = inner
        self.encoder = encoder
        # What "auto" means for this folder: sentence-transformers' 1_Pooling, else by kind.
        self.default_pooling = default_pooling

    def hidden(self, ids: mx.array, mask: mx.array) -> mx.array:
        """Last hidden states, (batch, length, dimension), for right-padded `ids`."""
        if self.encoder:
            return self.inner(ids, attention_mask=mask).last_hidden_state
        # The decoder's own causal mask is enough: with right padding a real token never
        # attends to a pad, so the pads change nothing the pooling reads. The inner model
        # stops after the final norm, before the language-model head.
        return self.inner.model(ids)


def load_embedder(location: str) -> tuple[EmbeddingModel, EmbeddingTokenizer, dict]:
    """(model, tokenizer, config.json) of the embedding model in folder `location`."""
    folder = Path(location)
    config = json.loads((folder / "config.json").read_text())
    encoder = config.get("model_type") in ENCODERS
    inner, tokenizer = _load_encoder(folder) if encoder else _load_decoder(folder)
    default = folder_pooling(folder) or ("mean" if encoder else "last")
    model = EmbeddingModel(inner, encoder, default)
    model.eval()  # encoders carry dropout layers
    return model, tokenizer, config


def _load_encoder(folder: Path) -> tuple[Any, EmbeddingTokenizer]:
    from mlx_embeddings.utils import load_model
    from tokenizers import Tokenizer

    # A local folder only (the pool checked config.json is there): mlx-embeddings reads it
    # as it is and never reaches for the hub.
    inner = load_model(folder)
    fastmath.swap_gelu(inner)  # BERT's exact GELU, ~3.5x faster on a CPU (fastmath.py)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    # The saved file may cap inputs (all-MiniLM: 128) or pad them; the runner does both.
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def encode(text: str, special: bool) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=special).ids

    return inner, EmbeddingTokenizer.probe(encode, eos_id=None)


def _load_decoder(folder: Path) -> tuple[Any, EmbeddingTokenizer]:
    from inference.engine import q6k

    inner, wrapper = q6k.load(folder)
    hf = wrapper._tokenizer

    def encode(text: str, special: bool) -> list[int]:
        return hf.encode(text, add_special_tokens=special)

    return inner, EmbeddingTokenizer.probe(encode, eos_id=hf.eos_token_id)
