"""llama.cpp's pre-tokenizers for byte-level BPE vocabularies, by the tokenizer.ggml.pre name a
GGUF file carries, as `tokenizers` pre-tokenizers.

The regexes are llama.cpp's (src/llama-vocab.cpp), not the models' original ones: llama.cpp
rewrote some for its regex engine (case-insensitive groups spelled out, \\p{Lu}-style classes as
lookaheads), and matching llama.cpp is the point. Each regex splits every piece the previous one
left, keeping matches and the text between them, as a tokenizers Split "isolated" does.
"""

# The regexes below are llama.cpp's, with its full-width and look-alike characters on purpose.
# ruff: noqa: RUF001

from __future__ import annotations

import re
from dataclasses import dataclass

from tokenizers import Regex, pre_tokenizers

__all__ = ["PRE_TOKENIZERS", "PreTokenizer", "pre_tokenizer"]


_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = _LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
_QWEN35 = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_JAIS2 = _LLAMA3.replace(
    r"|\s+(?!\S)|\s+",
    "".join(rf"|\s{{{n}}}(?!\S)" for n in (512, 256, 128, 64, 32, 16, 8, 4))
    + r"|\s{1,2}(?!\S)|\s{1}",
)
_UPPER_THEN_LOWER = r"((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+"
_LOWER_AFTER_UPPER = r"((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*"
_TEKKEN = (
    rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER_THEN_LOWER}|[^\r\n\p{{L}}\p{{N}}]?{_LOWER_AFTER_UPPER}"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_GPT4O_TAIL = r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
# The original of llama.cpp's lookahead spelling above (which tiny_aya and youtu keep).
_CASED_WORDS = (
    rf"[^\r\n\p{{L}}\p{{N}}]?[\p{{Lu}}\p{{Lt}}\p{{Lm}}\p{{Lo}}\p{{M}}]*"
    rf"[\p{{Ll}}\p{{Lm}}\p{{Lo}}\p{{M}}]+{_CONTRACTIONS}?"
    rf"|[^\r\n\p{{L}}\p{{N}}]?[\p{{Lu}}\p{{Lt}}\p{{Lm}}\p{{Lo}}\p{{M}}]+"
    rf"[\p{{Ll}}\p{{Lm}}\p{{Lo}}\p{{M}}]*{_CONTRACTIONS}?"
)
# tiny_aya's and afmoe's digits: llama.cpp's own code, not a regex. It cuts a run of digits into
# threes from the right, the first cut keeping the text before the run.
_DIGIT_GROUPS = r"\P{N}*\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N}))"
_GPT4O = (
    rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER_THEN_LOWER}{_CONTRACTIONS}?"
    rf"|[^\r\n\p{{L}}\p{{N}}]?{_LOWER_AFTER_UPPER}{_CONTRACTIONS}?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _code_points(spec: str) -> str:
    """A regex class body from hexadecimal code points and ranges ("B5 C0-D6"), so that the exact
    characters survive editors and Unicode normalisation."""
    return "".join("-".join(chr(int(cp, 16)) for cp in item.split("-")) for item in spec.split())


# deepseek-llm's letters: llama.cpp's explicit list rather than \p{L}.
_DEEPSEEK_LETTERS = "A-Za-z" + _code_points(
    "B5 C0-D6 D8-F6 F8-1BA 1BC-1BF 1C4-293 295-2AF 370-373 376 377 37B-37D 37F 386 388-38A 38C "
    "38E-3A1 3A3-3F5 3F7-481 48A-52F 531-556 10A0-10C5 13A0-13F5 13F8-13FD 1C90-1CBA 1CBD-1CBF "
    "1D00-1D2B 1D6B-1D77 1D79-1D9A 1E00-1F15 1F18-1F1D 1F20-1F45 1F48-1F4D 1F50-1F57 1F59 1F5B "
    "1F5D 1F5F-1F7D 1F80-1FB4 1FB6-1FBC 1FBE 1FC2-1FC4 1FC6-1FCC 1FD0-1FD3 1FD6-1FDB 1FE0-1FEC "
    "1FF2-1FF4 1FF6-1FFC 2102 2107 210A-2113 2115 2119-211D 2124 2126 2128 212A-212D 212F-2134 "
    "2139 213C-213F 2145-2149 214E 2183 2184 2C00-2C7B 2C7E-2CE4 2CEB-2CEE 2CF2 2CF3 A640-A66D "
    "A680-A69B A722-A76F A771-A787 A78B-A78E AB70-ABBF FB00-FB06 FB13-FB17 FF21-FF3A FF41-FF5A "
    "10400-1044F 104B0-104D3 104D8-104FB 10C80-10CB2 10CC0-10CF2 118A0-118DF 1E900-1E943"
)
_AFMOE_SCRIPTS = (
    "["
    + _code_points(
        "4E00-9FFF 3400-4DBF 8C48-FAFF 3040-309F 30A0-30FF FF65-FF9F 2F00-2FDF E40-E7F E80-EFF "
        "1780-17FF 1000-109F AA60-AA7F A9E0-A9FF AC00-D7AF 1100-11FF"
    )
    + "]+"
)
_CJK = "[一-龥ࠀ-一가-퟿]+"
_DEEPSEEK3 = (
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
    "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
)
_KANA_HAN = "[一-龥぀-ゟ゠-ヿ]+"
_BLOOM = " ?[^(\\s|.,!?…。，、।۔،)]+"
_STARCODER = (r"\p{N}", _GPT2)


@dataclass(frozen=True)
class PreTokenizer:
    """What llama.cpp does for one tokenizer.ggml.pre name."""

    patterns: tuple[str, ...]
    # A pre-tokenized word that is itself a token is kept whole (llama.cpp's ignore_merges).
    ignore_merges: bool = False
    # llama.cpp's add_bos default for the name, when the file has no add_bos_token.
    add_bos: bool = False
    # ChatGLM vocabularies have no BOS unless the file names one.
    no_default_bos: bool = False


def _names(names: str, pre: PreTokenizer) -> dict[str, PreTokenizer]:
    return dict.fromkeys(names.split(), pre)


PRE_TOKENIZERS: dict[str, PreTokenizer] = {
    **_names(
        "default",
        PreTokenizer((r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]")),
    ),
    **_names(
        "llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano",
        PreTokenizer((_LLAMA3,), ignore_merges=True, add_bos=True),
    ),
    **_names("dbrx smaug-bpe", PreTokenizer((_LLAMA3,))),
    **_names("jais-2", PreTokenizer((_JAIS2,))),
    **_names(
        "deepseek-llm",
        PreTokenizer(
            (
                "[\r\n]",
                f"\\s?[{_DEEPSEEK_LETTERS}]+",
                "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
                "\\s+$",
                _CJK,
                r"\p{N}+",
            )
        ),
    ),
    **_names(
        "deepseek-v3 hunyuan-dense joyai-llm hy_v4",
        PreTokenizer((r"\p{N}{1,3}", _KANA_HAN, _DEEPSEEK3)),
    ),
    **_names(
        "spark2_5",
        PreTokenizer(
            (
                r"\p{N}{1,3}",
                _KANA_HAN,
                _DEEPSEEK3.replace("[\r\n]*|\\s*[\r\n]+", "|[\r\n]"),
                r"\p{N}",
            )
        ),
    ),
    **_names(
        "youtu",
        PreTokenizer(
            (
                "[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+",
                _CASED_WORDS + r"|\p{N}" + _GPT4O_TAIL,
            ),
            ignore_merges=True,
        ),
    ),
    **_names(
        "deepseek-coder",
        PreTokenizer(("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}")),
    ),
    **_names("falcon", PreTokenizer((r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, "[0-9][0-9][0-9]"))),
    **_names(
        "starcoder refact command-r smollm codeshell exaone minerva-7b mellum2",
        PreTokenizer(_STARCODER),
    ),
    **_names(
        "gpt-2 phi-2 gigachat a.x-4.0 mellum mpt olmo jais trillion granite-docling exaone4",
        PreTokenizer((_GPT2,)),
    ),
    **_names(
        "qwen2 deepseek-r1-qwen kormo f2llmv2 megrez stablelm2 hunyuan solar-open grok-2",
        PreTokenizer((_QWEN2,)),
    ),
    **_names("qwen35", PreTokenizer((_QWEN35,))),
    **_names("poro-chat bloom gpt3-finnish", PreTokenizer((_BLOOM,))),
    **_names("viking", PreTokenizer((_BLOOM, r"\p{N}"))),
    **_names("chatglm-bpe", PreTokenizer((_LLAMA3,), no_default_bos=True)),
    **_names("glm4 glm5", PreTokenizer((_LLAMA3,), ignore_merges=True, no_default_bos=True)),
    **_names(
        "chameleon",
        PreTokenizer(
            (
                "<sentinel:[0-9]+>",
                "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
                "([\\t\\n]|    |  )",
                r"\p{N}",
                r"[\p{P}!-/:-@\[-`{-~]",
                _GPT2,
            ),
            add_bos=True,
        ),
    ),
    **_names(
        "exaone-moe",
        PreTokenizer(
            (
                _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+",
            )
        ),
    ),
    **_names(
        "tiny_aya cohere2moe",
        PreTokenizer((_DIGIT_GROUPS, _CASED_WORDS + r"|\p{N}{1,3}" + _GPT4O_TAIL)),
    ),
    **_names("afmoe", PreTokenizer((_DIGIT_GROUPS, _AFMOE_SCRIPTS, _DEEPSEEK3))),
    **_names("tekken", PreTokenizer((_TEKKEN,), ignore_merges=True, add_bos=True)),
    **_names("gpt-4o llama4 kanana2 talkie minimax-m2", PreTokenizer((_GPT4O,))),
    **_names(
        "seed-coder",
        PreTokenizer(
            (
                _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+",
            )
        ),
    ),
    **_names(
        "bailingmoe bailingmoe2 llada-moe",
        PreTokenizer(
            (
                r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
            )
        ),
    ),
    **_names("ufakzeka", PreTokenizer((_QWEN2.removeprefix(_CONTRACTIONS + "|"),))),
    **_names("laguna", PreTokenizer(("[^\\n]+|[\\n]+", _QWEN2))),
    **_names(
        "minicpm5",
        PreTokenizer(
            (r"\p{N}{1,3}", _LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}+")), ignore_merges=True
        ),
    ),
}


def pre_tokenizer(pre: PreTokenizer) -> pre_tokenizers.PreTokenizer:
    # llama.cpp's regex engine knows Unicode's general categories only: there \p{Lu}, \p{Ll},
    # \p{Lt}, \p{Lm} and \p{Lo} all mean any letter, and "iPhone" stays one word.
    patterns = [re.sub(r"\\p\{L[ultmo]\}", r"\\p{L}", p) for p in pre.patterns]
    splits = [pre_tokenizers.Split(Regex(p), behavior="isolated") for p in patterns]
    # The regexes run on the text; only then are its bytes mapped to GPT-2's byte alphabet.
    return pre_tokenizers.Sequence(
        [*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
