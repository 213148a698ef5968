"""Loading a reranker: cross-encoders on mlx-embeddings' encoder code with the sequence
classifier's head added here (mlx-embeddings has none), decoder rerankers through mlx-lm.

Both come back as a `Reranker`: `scores(ids, mask, lengths)` gives one relevance in [0, 1] per
right-padded row, so the runner never asks which kind it holds. Engine thread only."""

from __future__ import annotations

import glob
import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from inference.engine import fastmath
from inference.engine.types import EngineError, ErrorKind

# The prefix a sequence classifier's checkpoint puts before its encoder's weights.
ENCODER_PREFIX = {"bert": "bert.", "xlm-roberta": "roberta.", "xlm_roberta": "roberta."}


class Reranker(nn.Module):
    def scores(self, ids: mx.array, mask: mx.array, lengths: mx.array) -> mx.array:
        raise NotImplementedError


class CrossEncoder(Reranker):
    """BERT (pooler, then `classifier`) or XLM-RoBERTa (`classifier.dense`, tanh,
    `classifier.out_proj` over the first token), as Hugging Face's *ForSequenceClassification;
    one label: its sigmoid, as sentence-transformers' CrossEncoder scores."""

    def __init__(self, encoder: nn.Module, config: dict, sep_id: int | None) -> None:
        super().__init__()
        self.encoder = encoder
        hidden, labels = config["hidden_size"], len(config.get("id2label") or {0: ""})
        self.pooled = config["model_type"] == "bert"
        if self.pooled:
            self.classifier = nn.Linear(hidden, labels)
        else:
            self.classifier = RobertaHead(hidden, labels)
        # BERT reads the document as segment 1: the tokens after the first [SEP].
        self.sep_id = sep_id if config.get("type_vocab_size", 2) > 1 else None

    def scores(self, ids: mx.array, mask: mx.array, lengths: mx.array) -> mx.array:
        types = None
        if self.sep_id is not None:
            sep = (ids == self.sep_id).astype(mx.int32)
            types = ((mx.cumsum(sep, axis=1) - sep) > 0).astype(mx.int32)
        out = self.encoder(ids, attention_mask=mask, token_type_ids=types)
        if self.pooled:
            logits = self.classifier(out.pooler_output)
        else:
            logits = self.classifier(out.last_hidden_state[:, 0])
        if logits.shape[-1] == 1:
            return mx.sigmoid(logits[:, 0].astype(mx.float32))
        return mx.softmax(logits.astype(mx.float32), axis=-1)[:, -1]


class RobertaHead(nn.Module):
    def __init__(self, hidden: int, labels: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.out_proj = nn.Linear(hidden, labels)

    def __call__(self, x: mx.array) -> mx.array:
        return self.out_proj(mx.tanh(self.dense(x)))


class YesNoReranker(Reranker):
    """A causal LM asked whether the document meets the query (Qwen3-Reranker): the score is
    P("yes") against P("no") at the last position, softmax over those two logits."""

    def __init__(self, inner: nn.Module, yes_id: int, no_id: int) -> None:
        super().__init__()
        self.inner = inner
        self.yes_id, self.no_id = yes_id, no_id

    def scores(self, ids: mx.array, mask: mx.array, lengths: mx.array) -> mx.array:
        # Right padding: the causal mask keeps real tokens from seeing the pads.
        hidden = self.inner.model(ids)
        last = hidden[mx.arange(ids.shape[0]), lengths - 1]
        if hasattr(self.inner, "lm_head"):
            logits = self.inner.lm_head(last)
        else:  # tied embeddings
            logits = self.inner.model.embed_tokens.as_linear(last)
        pair = logits[:, [self.no_id, self.yes_id]].astype(mx.float32)
        return mx.softmax(pair, axis=-1)[:, 1]


def load_reranker(location: str) -> tuple[Reranker, None, dict]:
    """(model, no tokenizer: serving builds the pairs, config.json) of folder `location`."""
    folder = Path(location)
    config = json.loads((folder / "config.json").read_text())
    if config.get("model_type") in ENCODER_PREFIX:
        model: Reranker = _cross_encoder(folder, config)
    elif config.get("model_type") in ("modernbert",):
        raise EngineError(
            ErrorKind.MODEL_UNAVAILABLE,
            "ModernBERT rerankers are not supported yet (BERT and XLM-RoBERTa are).",
        )
    else:
        model = _decoder(folder)
    model.eval()  # encoders carry dropout layers
    return model, None, config


def _cross_encoder(folder: Path, config: dict) -> CrossEncoder:
    from mlx_embeddings.models import bert, xlm_roberta
    from tokenizers import Tokenizer

    kind = config["model_type"]
    architecture: Any = bert if kind == "bert" else xlm_roberta
    args = {**config, "add_pooling_layer": False} if kind != "bert" else config
    encoder = architecture.Model(architecture.ModelArgs.from_dict(args))
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    sep = tokenizer.token_to_id("[SEP]" if kind == "bert" else "</s>")
    model = CrossEncoder(encoder, config, sep)
    weights: dict[str, mx.array] = {}
    for file in sorted(glob.glob(str(folder / "model*.safetensors"))):
        weights.update(mx.load(file))
    prefix = ENCODER_PREFIX[kind]
    renamed = {
        (f"encoder.{k[len(prefix) :]}" if k.startswith(prefix) else k): v
        for k, v in encoder.sanitize(weights).items()
        if not k.endswith("position_ids")
    }
    model.load_weights(list(renamed.items()), strict=True)
    fastmath.swap_gelu(encoder)  # BERT's exact GELU, ~3.5x faster on a CPU (fastmath.py)
    mx.eval(model.parameters())
    return model


def _decoder(folder: Path) -> YesNoReranker:
    from inference.engine import q6k

    inner, wrapper = q6k.load(folder)
    hf = wrapper._tokenizer
    yes, no = hf.convert_tokens_to_ids("yes"), hf.convert_tokens_to_ids("no")
    if yes is None or no is None or yes == hf.unk_token_id or no == hf.unk_token_id:
        raise EngineError(
            ErrorKind.MODEL_UNAVAILABLE,
            "this decoder reranker's vocabulary has no single 'yes' and 'no' tokens to score",
        )
    return YesNoReranker(inner, yes, no)
