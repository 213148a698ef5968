"""A Hugging Face tokenizer.json rebuilt from a GGUF file's vocabulary, tokenizing like llama.cpp.

Three GGUF vocabularies are supported:

- SentencePiece ("llama"): llama.cpp merges adjacent symbols into the highest-scoring vocabulary
  token until none applies, and falls back to <0xXX> byte tokens. That is a BPE whose merges are
  every split of a token into two tokens, ranked by the merged token's score.
- Byte-level BPE ("gpt2"): the file's merges, after the pre-tokenizer regexes llama.cpp applies
  for the file's tokenizer.ggml.pre name.
- Gemma 4's BPE ("gemma4"): the file's merges on text whose spaces are ▁, split only at runs of
  newlines (llama.cpp's gemma4 pre-tokenizer), no space prefix; a run of newlines that is a token
  is that token.

Special tokens (control, unknown, user-defined) are split out of the text first, as llama.cpp does
when it parses special tokens (its server does for prompts).
"""

# The regexes below are llama.cpp's, with its full-width and look-alike characters on purpose.
# ruff: noqa: RUF001

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
)

from inference.conversion.gguf_file import UnsupportedGGUF
from inference.conversion.gguf_pretokenizers import PRE_TOKENIZERS, PreTokenizer, pre_tokenizer

__all__ = [
    "PRE_TOKENIZERS",
    "PreTokenizer",
    "TokenType",
    "UnsupportedGGUF",
    "Vocab",
    "build_tokenizer",
    "eog_token_ids",
    "read_vocab",
    "special_token_ids",
    "tokenizer_config",
]

SPACE = "\u2581"  # SentencePiece's visible space


class TokenType(IntEnum):  # llama.cpp's token types
    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


# --- the vocabulary -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Vocab:
    """A GGUF vocabulary with the defaults llama.cpp applies for keys the file leaves out."""

    model: str  # tokenizer.ggml.model: "llama" (SentencePiece), "gpt2" (byte-level BPE), "gemma4"
    tokens: list[str]
    types: list[int]
    pre: PreTokenizer | None
    special: dict[str, int | None]  # bos, eos, unknown, padding -> id
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool

    @property
    def byte_level(self) -> bool:
        return self.model == "gpt2"


def read_vocab(metadata: dict) -> Vocab:
    kind = metadata.get("tokenizer.ggml.model")
    if kind not in ("llama", "gpt2", "gemma4"):
        raise UnsupportedGGUF(
            f"tokenizer model {kind!r} is not supported (supported: 'llama' SentencePiece, "
            "'gpt2' byte-level BPE and 'gemma4' BPE)"
        )
    spm = kind == "llama"
    pre = _known_pre(metadata) if kind == "gpt2" else None
    tokens = _tokens(metadata)
    types = metadata.get("tokenizer.ggml.token_type") or [TokenType.NORMAL] * len(tokens)
    if len(types) < len(tokens):
        raise UnsupportedGGUF("tokenizer.ggml.token_type is shorter than the vocabulary")
    # llama.cpp: SentencePiece adds BOS by default; BPE only for some pre-tokenizers.
    add_bos = metadata.get("tokenizer.ggml.add_bos_token", spm or bool(pre and pre.add_bos))
    return Vocab(
        model=kind,
        tokens=tokens,
        types=[int(t) for t in types[: len(tokens)]],
        pre=pre,
        special=_special_ids(metadata, kind, pre, len(tokens)),
        add_bos=bool(add_bos),
        add_eos=bool(metadata.get("tokenizer.ggml.add_eos_token", False)),
        add_space_prefix=bool(metadata.get("tokenizer.ggml.add_space_prefix", spm)),
    )


def _known_pre(metadata: dict) -> PreTokenizer:
    name = metadata.get("tokenizer.ggml.pre") or "default"  # llama.cpp's fallback, with a warning
    if name not in PRE_TOKENIZERS:
        raise UnsupportedGGUF(
            f"pre-tokenizer {name!r} is not supported (known: {', '.join(sorted(PRE_TOKENIZERS))})"
        )
    return PRE_TOKENIZERS[name]


def _tokens(metadata: dict) -> list[str]:
    # llama.cpp renames empty tokens so that every token has a text of its own.
    tokens = [t or f"[EMPTY_{i}]" for i, t in enumerate(metadata["tokenizer.ggml.tokens"])]
    if len(set(tokens)) != len(tokens):
        # llama.cpp refuses such a vocabulary too (an assertion when it loads).
        raise UnsupportedGGUF("the vocabulary lists the same token twice")
    return tokens


def _special_ids(
    metadata: dict, kind: str, pre: PreTokenizer | None, count: int
) -> dict[str, int | None]:
    # llama.cpp's defaults: SentencePiece <unk> 0, <s> 1, </s> 2; BPE 11 for both BOS and EOS;
    # Gemma 4 none (the file's own).
    if kind == "llama":
        ids: dict[str, int | None] = {"bos": 1, "eos": 2, "unknown": 0, "padding": None}
    elif kind == "gemma4":
        ids = dict.fromkeys(("bos", "eos", "unknown", "padding"))
    else:
        ids = {"bos": 11, "eos": 11, "unknown": None, "padding": None}
        if pre is not None and pre.no_default_bos:
            ids["bos"] = None
    for name, default in ids.items():
        if default is not None and default >= count:
            ids[name] = default = None
        value = metadata.get(f"tokenizer.ggml.{name}_token_id")
        # An id outside the vocabulary is ignored, as llama.cpp does (with a warning).
        if value is not None and 0 <= int(value) < count:
            ids[name] = int(value)
    return ids


def special_token_ids(metadata: dict) -> dict[str, int | None]:
    """bos, eos, unknown and padding ids as llama.cpp resolves them (defaults included)."""
    return read_vocab(metadata).special


# Texts llama.cpp treats as control tokens whatever their type says (its EOG and FIM detection).
_EOG_TEXTS = frozenset(
    [
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<|return|>",
        "<|call|>",
        "<|flush|>",
        "<|calls|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "</s>",
        "<|eom_id|>",
        "<EOT>",
        "_<EOT>",
        "[EOT]",
        "[EOS]",
        "<|end_of_text|>",
        "<end_of_utterance>",
        "<eos>",
        "<turn|>",
        "<|tool_response>",
        "<｜end▁of▁sentence｜>",
        "[e~[",
    ]
)
_FIM_TEXTS = {
    "fim_pre": "<|fim_prefix|> <fim-prefix> <fim_prefix> <｜fim▁begin｜> <PRE> ▁<PRE> "
    "<|code_prefix|> <|prefix|>",
    "fim_suf": "<|fim_suffix|> <fim-suffix> <fim_suffix> <｜fim▁hole｜> <SUF> ▁<SUF> "
    "<|code_suffix|> <|suffix|>",
    "fim_mid": "<|fim_middle|> <fim-middle> <fim_middle> <｜fim▁end｜> <MID> ▁<MID> "
    "<|code_middle|> <|middle|>",
    "fim_pad": "<|fim_pad|> <fim-pad> <fim_pad> <PAD> [PAD]",
    "fim_rep": "<|fim_repo|> <|repo_name|> <fim-repo> <REPO> <reponame>",
    "fim_sep": "<|file_sep|>",
}
# gpt-oss: llama.cpp renders these, as user-defined tokens.
_USER_TEXTS = frozenset(["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"])


def _file_id(metadata: dict, key: str, count: int) -> int | None:
    value = metadata.get(f"tokenizer.ggml.{key}_token_id")
    return int(value) if value is not None and 0 <= int(value) < count else None


def _control_texts(metadata: dict, count: int) -> set[str]:
    texts = set(_EOG_TEXTS)
    for key, names in _FIM_TEXTS.items():
        if _file_id(metadata, key, count) is None:  # llama.cpp looks for them by text only then
            texts.update(names.split())
    return texts


def _split_out(vocab: Vocab, metadata: dict) -> tuple[list[str], list[str]]:
    """The special tokens and the user-defined tokens llama.cpp splits out of the text."""
    controls = _control_texts(metadata, len(vocab.tokens))
    # gpt-oss and solar-open: "<|end|>" ends a message, not generation; llama.cpp makes it
    # user-defined when the vocabulary has the tokens that do end generation.
    gpt_oss_end = _message_end(set(vocab.tokens))
    if _normal_s(set(vocab.tokens)):
        controls.discard("</s>")
    special, user = [], []
    for token, kind in zip(vocab.tokens, vocab.types, strict=True):
        if token in _USER_TEXTS or (gpt_oss_end and token == "<|end|>"):
            user.append(token)
        elif kind in (TokenType.CONTROL, TokenType.UNKNOWN) or token in controls:
            special.append(token)
        elif kind == TokenType.USER_DEFINED:
            user.append(token)
    return special, user


def _add_split_tokens(tokenizer: Tokenizer, vocab: Vocab, metadata: dict) -> None:
    special, user = _split_out(vocab, metadata)
    # Phi-3: llama.cpp strips the whitespace after its special tokens, except these three.
    name = str(metadata.get("general.name", "")).lower()
    phi3 = "phi-3" in name or "phi3" in name
    kept = {"<unk>", "<s>", "<|endoftext|>"}

    def added(text: str, is_special: bool) -> AddedToken:
        rstrip = phi3 and text not in kept
        return AddedToken(text, special=is_special, normalized=False, rstrip=rstrip)

    tokenizer.add_special_tokens([added(t, True) for t in special])
    tokenizer.add_tokens([added(t, False) for t in user])


def eog_token_ids(metadata: dict) -> list[int]:
    """The tokens that end generation in llama.cpp: EOS, EOT, EOM, the FIM pad, repo and file
    separator, and the ones it recognises by their text (<|im_end|>, <end_of_turn>, ...)."""
    vocab = read_vocab(metadata)
    index = {token: i for i, token in enumerate(vocab.tokens)}
    ids = {index[text] for text in _EOG_TEXTS if text in index}
    if vocab.special["eos"] is not None:
        ids.add(vocab.special["eos"])
    for key in ("eot", "eom", "fim_pad", "fim_rep", "fim_sep"):
        found = _file_id(metadata, key, len(index))
        if found is not None:
            ids.add(found)
        elif key.startswith("fim"):
            ids.update(index[text] for text in _FIM_TEXTS[key].split() if text in index)
    if _message_end(set(index)):
        ids.discard(index["<|end|>"])
    if _normal_s(set(index)):
        ids.discard(index["</s>"])
    return sorted(ids)


def _message_end(present: set[str]) -> bool:
    return "<|end|>" in present and (
        {"<|return|>", "<|call|>"} <= present or {"<|calls|>", "<|flush|>"} <= present
    )


def _normal_s(present: set[str]) -> bool:
    # Gemma 4: "</s>" is a normal token (text), not an end, beside Gemma 4's own end markers.
    return "</s>" in present and "<|tool_response>" in present


# --- building the tokenizer -----------------------------------------------------------------------


def build_tokenizer(metadata: dict) -> Tokenizer:
    """The tokenizer.json for a GGUF's metadata: llama.cpp's ids for any text, special tokens
    parsed, BOS and EOS added as llama.cpp adds them."""
    vocab = read_vocab(metadata)
    build = {"llama": _sentencepiece, "gpt2": _byte_level_bpe, "gemma4": _gemma4_bpe}[vocab.model]
    tokenizer = build(vocab, metadata)
    tokenizer.post_processor = _post_processor(vocab)
    _add_split_tokens(tokenizer, vocab, metadata)
    return tokenizer


def _file_merges(metadata: dict, index: dict[str, int]) -> list[tuple[str, str]]:
    merges = []
    for merge in metadata.get("tokenizer.ggml.merges", []):
        cut = merge.find(" ", 1)  # llama.cpp splits at the first space after the first character
        left, right = merge[:cut], merge[cut + 1 :]
        # A merge whose result is no token cannot be expressed; llama.cpp would spell its bytes.
        if cut > 0 and left + right in index:
            merges.append((left, right))
    return merges


def _byte_level_bpe(vocab: Vocab, metadata: dict) -> Tokenizer:
    assert vocab.pre is not None
    index = {token: i for i, token in enumerate(vocab.tokens)}
    merges = _file_merges(metadata, index)
    model = models.BPE(
        vocab=index, merges=merges, fuse_unk=False, ignore_merges=vocab.pre.ignore_merges
    )
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizer(vocab.pre)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _gemma4_bpe(vocab: Vocab, metadata: dict) -> Tokenizer:
    if "tokenizer.ggml.merges" not in metadata:
        raise UnsupportedGGUF("a gemma4 vocabulary without tokenizer.ggml.merges")
    index = {token: i for i, token in enumerate(vocab.tokens)}
    # a character outside the vocabulary is spelled in <0xXX> byte tokens, as llama.cpp does
    merges = _file_merges(metadata, index)
    model = models.BPE(vocab=index, merges=merges, fuse_unk=False, byte_fallback=True)
    tokenizer = Tokenizer(model)
    tokenizer.normalizer = normalizers.Replace(" ", SPACE)
    # llama.cpp's gemma4 regex, [^\n]+|[\n]+: runs of newlines apart from the rest.
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("\n+"), behavior="isolated")
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    tokenizer.decoder = decoders.Sequence(steps)
    return tokenizer


def _sentencepiece(vocab: Vocab, metadata: dict) -> Tokenizer:
    scores = metadata.get("tokenizer.ggml.scores") or [0.0] * len(vocab.tokens)
    if len(scores) < len(vocab.tokens):
        raise UnsupportedGGUF("tokenizer.ggml.scores is shorter than the vocabulary")
    index = {token: i for i, token in enumerate(vocab.tokens)}
    unknown = vocab.special["unknown"]
    model = models.BPE(
        vocab=index,
        merges=_score_merges(vocab.tokens, scores, index),
        unk_token=vocab.tokens[unknown] if unknown is not None else None,
        fuse_unk=True,
        byte_fallback=True,
    )
    tokenizer = Tokenizer(model)
    # llama.cpp escapes spaces as ▁ and, with add_space_prefix, puts one before every stretch of
    # text between special tokens; a normalizer runs on each such stretch separately.
    replace = normalizers.Replace(" ", SPACE)
    if vocab.add_space_prefix:
        tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend(SPACE), replace])
    else:
        tokenizer.normalizer = replace
    # This exact chain is what mlx-lm recognises as SentencePiece for its streaming detokenizer.
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if vocab.add_space_prefix:
        steps.append(decoders.Strip(" ", 1, 0))
    tokenizer.decoder = decoders.Sequence(steps)
    return tokenizer


def _score_merges(
    tokens: Sequence[str], scores: Sequence[float], index: dict[str, int]
) -> list[tuple[str, str]]:
    """Every way to make a token from two tokens, best score first.

    llama.cpp joins the adjacent pair whose concatenation is the highest-scoring token, whatever
    split produced it; a BPE merge per split, ranked by the result's score, does the same. Linear
    in the vocabulary's total length: a 256k-token vocabulary takes a few seconds.

    One difference remains in theory: between equally scored candidates llama.cpp takes the
    leftmost, a BPE the lower rank (here the lower token id). SentencePiece gives each piece of a
    model its own score, so only pieces added afterwards could tie."""
    ranked = []
    for token_id, token in enumerate(tokens):
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in index and right in index:
                ranked.append((-float(scores[token_id]), token_id, cut, left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def _post_processor(vocab: Vocab) -> processors.PostProcessor:
    bos = vocab.special["bos"] if vocab.add_bos else None
    eos = vocab.special["eos"] if vocab.add_eos else None

    def sequence(name: str, type_id: int) -> list[str]:
        # Lists rather than one string: a token's text may hold spaces.
        return [
            *([vocab.tokens[bos]] if bos is not None else []),
            f"${name}:{type_id}",
            *([vocab.tokens[eos]] if eos is not None else []),
        ]

    template = processors.TemplateProcessing(
        single=sequence("A", 0),
        pair=sequence("A", 0) + sequence("B", 1),
        special_tokens=sorted({(vocab.tokens[i], i) for i in (bos, eos) if i is not None}),
    )
    if not vocab.byte_level:
        return template
    return processors.Sequence([processors.ByteLevel(trim_offsets=False), template])


def tokenizer_config(metadata: dict, config: dict) -> dict:
    """tokenizer_config.json values, with llama.cpp's defaults for what the file leaves out."""
    vocab = read_vocab(metadata)

    def token(key: str) -> str | None:
        index = vocab.special[key]
        return vocab.tokens[index] if index is not None else None

    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": token("bos"),
        "eos_token": token("eos"),
        "unk_token": token("unknown"),
        "pad_token": token("padding"),
        # The same answers as the tokenizer.json post-processor: transformers rebuilds that
        # post-processor from these two when they are present.
        "add_bos_token": vocab.add_bos and vocab.special["bos"] is not None,
        "add_eos_token": vocab.add_eos and vocab.special["eos"] is not None,
        "clean_up_tokenization_spaces": False,
        "model_max_length": config["max_position_embeddings"],
        "chat_template": metadata.get("tokenizer.chat_template"),
    }
