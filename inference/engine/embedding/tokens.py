"""Inputs to token ids, with the special tokens the model was trained with around them.

Text and token-id inputs get the same specials (BERT's [CLS] ... [SEP], a decoder's BOS if its
tokenizer adds one), so a client's ids of a text embed exactly as the text does. The specials
are found once by probing the tokenizer: the ids of a text with and without them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PROBE = "hello"
# model_type values read by mlx-embeddings' bidirectional encoders (attention mask, no cache).
ENCODERS = {"bert", "xlm-roberta", "xlm_roberta", "modernbert"}

Encode = Callable[[str, bool], list[int]]  # (text, add special tokens) -> ids


@dataclass(frozen=True)
class EmbeddingTokenizer:
    encode_text: Encode
    prefix: tuple[int, ...]  # special tokens before the content
    suffix: tuple[int, ...]  # and after it
    eos_id: int | None  # decoders: appended for last-token pooling when not already there

    @classmethod
    def probe(cls, encode: Encode, eos_id: int | None) -> EmbeddingTokenizer:
        plain, full = encode(PROBE, False), encode(PROBE, True)
        for start in range(len(full) - len(plain) + 1):
            if full[start : start + len(plain)] == plain:
                prefix, suffix = full[:start], full[start + len(plain) :]
                return cls(encode, tuple(prefix), tuple(suffix), eos_id)
        return cls(encode, (), (), eos_id)  # an odd post-processor: ids as they come

    def specials(self, last_pooling: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(prefix, suffix) for one input. Decoder embedders (Qwen3-Embedding, e5-mistral,
        gte-Qwen2) read the final EOS's hidden state: Qwen3-Embedding's tokenizer appends it,
        the others' do not, so it is added here when missing."""
        suffix = self.suffix
        if last_pooling and self.eos_id is not None and suffix[-1:] != (self.eos_id,):
            suffix = (*suffix, self.eos_id)
        return self.prefix, suffix

    def content(self, text: str) -> list[int]:
        return self.encode_text(text, False)


def content_encoder(folder: Path) -> Callable[[str], list[int]]:
    """Text to its content ids (no special tokens) as the embedding model's own tokenizer
    reads it, without the weights: serving tokenizes text inputs with it, off the engine
    thread, and sends the ids (the engine adds the specials, as for ids a client sent)."""
    config = json.loads((folder / "config.json").read_text())
    if config.get("model_type") in ENCODERS:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tokenizer.no_truncation()  # the saved file may cap inputs: the runner cuts them
        tokenizer.no_padding()
        return lambda text: tokenizer.encode(text, add_special_tokens=False).ids
    from mlx_lm.utils import load_tokenizer

    hf = load_tokenizer(folder)._tokenizer
    return lambda text: hf.encode(text, add_special_tokens=False)
