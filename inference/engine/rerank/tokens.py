"""A query and its documents as the ids a reranker reads, built from the model's tokenizer
alone (serving's prompt threads, engine/vocabulary.py): the engine receives whole pairs.

A cross-encoder (BERT, XLM-RoBERTa) reads its tokenizer's own pair template: `[CLS] query [SEP]
document [SEP]` (XLM-R: `<s> query </s></s> document </s>`). A decoder reranker reads the prompt
Qwen3-Reranker was trained on, which asks for "yes" or "no" (its model card's format). Either
way a pair over the limit loses the end of its document, as Cohere's and Jina's APIs cut
documents; a query that leaves no room for any document is refused."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inference.engine.embedding.tokens import ENCODERS
from inference.engine.types import EngineError, ErrorKind

DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
SYSTEM = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
    'and the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n'
    "<|im_start|>user\n"
)
ASSISTANT = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def no_room(query_tokens: int, limit: int) -> EngineError:
    return EngineError(
        ErrorKind.CONTEXT_LENGTH_EXCEEDED,
        f"The query takes {query_tokens} tokens with the model's markers, which leaves no room "
        f"for a document: this model reads at most {limit} tokens per query and document.",
        param="query",
    )


@dataclass(frozen=True)
class CrossEncoderPairs:
    tokenizer: Any  # tokenizers.Tokenizer, its saved truncation and padding off
    max_length: int  # what the position embeddings allow

    def __call__(self, query: str, documents: list[str], limit: int, instruction: str) -> list:
        limit = min(limit, self.max_length)
        tokenizer = self.tokenizer
        head = tokenizer.encode(query, add_special_tokens=False)
        room = limit - tokenizer.num_special_tokens_to_add(True) - len(head.ids)
        if room < 1:
            raise no_room(limit - room, limit)
        pairs = []
        for text in documents:
            document = tokenizer.encode(text, add_special_tokens=False)
            document.truncate(room)
            pairs.append(tuple(tokenizer.post_process(head, document, True).ids))
        return pairs


@dataclass(frozen=True)
class YesNoPairs:
    tokenizer: Any  # the Hugging Face tokenizer

    def __call__(self, query: str, documents: list[str], limit: int, instruction: str) -> list:
        def encode(text: str) -> list[int]:
            return self.tokenizer.encode(text, add_special_tokens=False)

        opening, closing = encode(SYSTEM), encode(ASSISTANT)
        asked = f"<Instruct>: {instruction or DEFAULT_INSTRUCTION}\n<Query>: {query}\n<Document>: "
        room = limit - len(opening) - len(closing)
        if len(encode(asked)) >= room:
            raise no_room(len(opening) + len(encode(asked)) + len(closing), limit)
        # Tokenized whole and cut at its end, as the model card's code does: the document is
        # last, so it is what loses tokens.
        return [(*opening, *encode(asked + text)[:room], *closing) for text in documents]


def pair_encoder(folder: Path) -> CrossEncoderPairs | YesNoPairs:
    config = json.loads((folder / "config.json").read_text())
    if config.get("model_type") in ENCODERS:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        positions = config.get("max_position_embeddings", 512)
        if config["model_type"] != "bert":
            # RoBERTa's positions start after the padding index: 514 slots read 512 tokens.
            positions -= config.get("pad_token_id", 1) + 1
        return CrossEncoderPairs(tokenizer, positions)
    from mlx_lm.utils import load_tokenizer

    return YesNoPairs(load_tokenizer(folder)._tokenizer)
