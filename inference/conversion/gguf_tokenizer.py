"""A Hugging Face tokenizer.json rebuilt from a GGUF file's vocabulary and merges."""

from __future__ import annotations

from enum import IntEnum

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

from inference.conversion.gguf_file import UnsupportedGGUF


class TokenType(IntEnum):  # llama.cpp's token types
    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


# llama.cpp's pre-tokenizer regexes, by the name GGUF stores in tokenizer.ggml.pre.
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = _LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")


def _byte_level(use_regex: bool = True) -> pre_tokenizers.ByteLevel:
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=use_regex)


def _split_then_bytes(pattern: str) -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(pattern), behavior="isolated"), _byte_level(False)]
    )


def _digits_then_bytes() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), _byte_level()])


PRE_TOKENIZERS = {
    "default": _byte_level,
    "gpt-2": _byte_level,
    "gpt2": _byte_level,
    "smollm": _digits_then_bytes,
    "starcoder": _digits_then_bytes,
    "refact": _digits_then_bytes,
    "llama-bpe": lambda: _split_then_bytes(_LLAMA3_SPLIT),
    "llama3": lambda: _split_then_bytes(_LLAMA3_SPLIT),
    "qwen2": lambda: _split_then_bytes(_QWEN2_SPLIT),
}


def build_tokenizer(metadata: dict) -> Tokenizer:
    kind = metadata.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise UnsupportedGGUF(
            f"tokenizer model {kind!r} is not supported (only byte-level BPE, 'gpt2')"
        )
    pre = metadata.get("tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise UnsupportedGGUF(
            f"pre-tokenizer {pre!r} is not supported (known: {', '.join(sorted(PRE_TOKENIZERS))})"
        )
    tokens: list[str] = metadata["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ", 1)) for m in metadata["tokenizer.ggml.merges"]]
    vocab = {token: index for index, token in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tokenizer.pre_tokenizer = PRE_TOKENIZERS[pre]()
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = _post_processor(metadata, tokens)
    _add_special_tokens(tokenizer, tokens, _token_types(metadata, len(tokens)))
    return tokenizer


def _token_types(metadata: dict, count: int) -> list[int]:
    types = metadata.get("tokenizer.ggml.token_type")
    if types is None:
        return [TokenType.NORMAL] * count
    return types.tolist() if hasattr(types, "tolist") else list(types)


def _add_special_tokens(tokenizer: Tokenizer, tokens: list[str], types: list[int]) -> None:
    control = [t for t, kind in zip(tokens, types, strict=True) if kind == TokenType.CONTROL]
    user = [t for t, kind in zip(tokens, types, strict=True) if kind == TokenType.USER_DEFINED]
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in user])


def _post_processor(metadata: dict, tokens: list[str]) -> processors.PostProcessor:
    byte_level = processors.ByteLevel(trim_offsets=False)
    bos_id = metadata.get("tokenizer.ggml.bos_token_id")
    if not metadata.get("tokenizer.ggml.add_bos_token") or bos_id is None:
        return byte_level
    bos = tokens[int(bos_id)]
    template = processors.TemplateProcessing(
        single=f"{bos}:0 $A:0",
        pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
        special_tokens=[(bos, int(bos_id))],
    )
    return processors.Sequence([byte_level, template])


def tokenizer_config(metadata: dict, config: dict) -> dict:
    tokens = metadata["tokenizer.ggml.tokens"]

    def token(key: str) -> str | None:
        index = metadata.get(f"tokenizer.ggml.{key}_token_id")
        return tokens[int(index)] if index is not None else None

    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": token("bos"),
        "eos_token": token("eos"),
        "unk_token": token("unknown"),
        "pad_token": token("padding"),
        "add_bos_token": bool(metadata.get("tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": bool(metadata.get("tokenizer.ggml.add_eos_token", False)),
        "clean_up_tokenization_spaces": False,
        "model_max_length": config["max_position_embeddings"],
        "chat_template": metadata.get("tokenizer.chat_template"),
    }
