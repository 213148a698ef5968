"""The tokenizer rebuilt from a GGUF vocabulary, checked against llama.cpp's own (llama-tokenize).

SentencePiece: a small model trained here (BPE, byte fallback, user-defined and control symbols),
written to GGUF the way llama.cpp's converter writes one, in llama, Gemma and Phi-3 flavours.
Byte-level BPE: the demo model's real vocabulary and merges under every pre-tokenizer name we
support. In each case our ids for a multilingual text with special tokens in it must be exactly
llama-tokenize's, BOS and EOS included, and the text must decode back. Then real models'
vocabularies from llama.cpp's test files, on its test strings.
"""

from __future__ import annotations

import io
import json
import re
import struct
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import sentencepiece
from gguf import GGUFWriter
from tokenizers import Tokenizer

from inference.conversion.gguf_file import read_metadata
from inference.conversion.gguf_tokenizer import (
    PRE_TOKENIZERS,
    PreTokenizer,
    TokenType,
    UnsupportedGGUF,
    build_tokenizer,
    eog_token_ids,
    special_token_ids,
    tokenizer_config,
)

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

PROSE = (
    "Hello world! The quick brown fox can't stop; it's 3.14 or 1234567, isn't it? "
    "I'M SURE you'LL see.\n"
    "Café naïve résumé déjà vu — Größe über Straße, l'été très français.\n"
    "中文测试：你好，世界。日本語のテキスト、カタカナとひらがな。\n"
    "Русский текст: Привет, мир! العربية: مرحبا بالعالم.\n"
    "Emoji 🎉👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ ½ ² $100 + <=> ^~| `code` 12,345.67 HTTPServer iPhone\n"
    "def f(x):\n\treturn x  +  1\n\n    if x:\n        pass\r\n"
    "spaces   many     here  \n\n\n end  "
)
# Starts with a special token, so that every stretch of text follows one: llama.cpp puts its
# SentencePiece space prefix before each, which decoding then shows.
TEMPLATE = "{0}user\n" + PROSE + "{1}\n{0}assistant\n{2} call {3}   done{1}\n{4}tail  "


def sample_text(specials: tuple[str, ...]) -> str:
    return TEMPLATE.format(*specials)


@dataclass
class Reference:
    """What llama-tokenize says about a GGUF file."""

    ids: list[int]
    info: dict[str, list[int]] = field(default_factory=dict)  # "BOS", "EOS", "EOG", ... -> ids


def llama_tokenize(tools: Path, gguf: Path, text_file: Path) -> Reference:
    # -f with --no-escape: the text's bytes exactly; -v: the vocabulary summary (print_info).
    command = [tools / "llama-tokenize", "-m", gguf, "-f", text_file, "--ids", "--no-escape", "-v"]
    # llama.cpp logs from a thread that the program's exit sometimes cuts short; the ids, on
    # stdout, always come. So: again until the summary's last line is there too.
    for _ in range(20):
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            pytest.fail(f"llama-tokenize failed on {gguf.name}:\n{result.stderr[-3000:]}")
        if "print_info: max token length" in result.stderr:
            break
    else:
        pytest.fail(f"llama-tokenize never printed its vocabulary summary for {gguf.name}")
    info: dict[str, list[int]] = {}
    for name, token in re.findall(r"print_info: (\w+) token +=\s+(\d+)", result.stderr):
        info.setdefault(name, []).append(int(token))
    return Reference(json.loads(result.stdout.strip().splitlines()[-1]), info)


def write_text(path: Path, text: str) -> Path:
    path.write_bytes(text.encode())  # bytes: no newline translation
    return path


def write_gguf(path: Path, metadata: dict) -> Path:
    """A vocabulary-only GGUF (llama.cpp loads no tensors for tokenizing), written with the keys
    and value types llama.cpp's converter uses."""
    writer = GGUFWriter(str(path), "llama")
    add = {
        "general.name": writer.add_name,
        "tokenizer.ggml.model": writer.add_tokenizer_model,
        "tokenizer.ggml.pre": writer.add_tokenizer_pre,
        "tokenizer.ggml.tokens": writer.add_token_list,
        "tokenizer.ggml.scores": writer.add_token_scores,
        "tokenizer.ggml.token_type": writer.add_token_types,
        "tokenizer.ggml.merges": writer.add_token_merges,
        "tokenizer.ggml.bos_token_id": writer.add_bos_token_id,
        "tokenizer.ggml.eos_token_id": writer.add_eos_token_id,
        "tokenizer.ggml.unknown_token_id": writer.add_unk_token_id,
        "tokenizer.ggml.padding_token_id": writer.add_pad_token_id,
        "tokenizer.ggml.add_bos_token": writer.add_add_bos_token,
        "tokenizer.ggml.add_eos_token": writer.add_add_eos_token,
        "tokenizer.ggml.add_space_prefix": writer.add_add_space_prefix,
    }
    for key, value in metadata.items():
        add[key](value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def ids_of(tokenizer: Tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=True).ids


def check_transformers_and_mlx_lm(
    tokenizer: Tokenizer, metadata: dict, folder: Path, text: str, reference: Reference
) -> str:
    """The files the importer writes, loaded the way the server loads them: transformers encodes
    to llama.cpp's ids, and mlx-lm's streaming detokenizer (ours, via make_detokenizer) is the
    right kind. Returns the streamed text of the ids, BOS and EOS left out."""
    from mlx_lm.tokenizer_utils import load

    from inference.engine.detokenize import make_detokenizer

    folder.mkdir()
    tokenizer.save(str(folder / "tokenizer.json"))
    config = tokenizer_config(metadata, {"max_position_embeddings": 4096})
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    wrapper = load(folder)
    assert wrapper.encode(text) == reference.ids  # transformers, special tokens added
    detokenizer = make_detokenizer(wrapper)
    spaced = metadata["tokenizer.ggml.model"] in ("llama", "gemma4")  # ▁ for spaces
    expected_kind = "SPM" if spaced else "BPE"
    assert type(detokenizer).__name__ == f"{expected_kind}StreamingDetokenizer"
    for token in without_bos_eos(reference.ids, config):
        detokenizer.add_token(token)
    detokenizer.finalize()
    return detokenizer.text


def without_bos_eos(ids: list[int], config: dict) -> list[int]:
    start = 1 if config["add_bos_token"] else 0
    end = len(ids) - 1 if config["add_eos_token"] else len(ids)
    return ids[start:end]


# --- SentencePiece --------------------------------------------------------------------------------

SPM_SPECIALS = ("<|im_start|>", "<|im_end|>", "<tool>", "</tool>", "<unk>")
USER_DEFINED = ("<tool>", "</tool>")
CORPUS = (
    "Hello world! The quick brown fox jumps over the lazy dog. It's 3.14, isn't it?",
    "Café naïve résumé — déjà vu. Größe über Straße; très français, l'été.",
    "中文测试：你好，世界。日本語のテキスト、カタカナとひらがな。",
    "Русский текст, Привет мир! Numbers 1234567 and 2024-01-01.",
    "def f(x):\n\treturn x  +  1\n    if x:\n        pass",
    "the theory of the thing is that there are other things in the world",
)  # no Arabic and no emoji: those reach llama.cpp's byte fallback


@pytest.fixture(scope="session")
def spm_vocab() -> dict:
    """A SentencePiece BPE model trained here, as llama.cpp's converter turns one into GGUF
    metadata: pieces, scores and token types (user-defined symbols as USER_DEFINED, which is what
    the converter makes of a tokenizer_config's non-special added tokens)."""
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS * 30),
        model_writer=model,
        model_type="bpe",
        vocab_size=700,
        byte_fallback=True,
        user_defined_symbols=list(USER_DEFINED),
        control_symbols=["<|im_start|>", "<|im_end|>"],
        split_digits=True,
        allow_whitespace_only_pieces=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        hard_vocab_limit=False,
        num_threads=1,
        minloglevel=2,
    )
    processor = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    tokens, scores, types = [], [], []
    for index in range(processor.vocab_size()):
        tokens.append(processor.IdToPiece(index))
        scores.append(processor.GetScore(index))
        types.append(_spm_type(processor, index))
    return {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.token_type": types,
    }


def _spm_type(processor: sentencepiece.SentencePieceProcessor, index: int) -> TokenType:
    if processor.IsUnknown(index):
        return TokenType.UNKNOWN
    if processor.IsControl(index):
        return TokenType.CONTROL
    if processor.IsUnused(index):
        return TokenType.UNUSED
    if processor.IsByte(index):
        return TokenType.BYTE
    if processor.IdToPiece(index) in USER_DEFINED:
        return TokenType.USER_DEFINED
    return TokenType.NORMAL


def _appended(vocab: dict, tokens: list[str], score: float, kind: TokenType) -> dict:
    return {
        **vocab,
        "tokenizer.ggml.tokens": [*vocab["tokenizer.ggml.tokens"], *tokens],
        "tokenizer.ggml.scores": [*vocab["tokenizer.ggml.scores"], *[score] * len(tokens)],
        "tokenizer.ggml.token_type": [*vocab["tokenizer.ggml.token_type"], *[kind] * len(tokens)],
    }


def _padded(vocab: dict, count: int) -> dict:
    # The converter pads the vocabulary to the model's size with unused "[PADn]" tokens.
    size = len(vocab["tokenizer.ggml.tokens"])
    pads = [f"[PAD{i}]" for i in range(size, size + count)]
    return _appended(vocab, pads, -10000.0, TokenType.UNUSED)


SPM_IDS = {
    "tokenizer.ggml.bos_token_id": 1,
    "tokenizer.ggml.eos_token_id": 2,
    "tokenizer.ggml.unknown_token_id": 0,
}
SPM_VARIANTS: dict[str, Callable[[dict], dict]] = {
    # No special ids, no flags: llama.cpp's defaults (<unk> 0, <s> 1, </s> 2, BOS, space prefix).
    "llama-defaults": lambda vocab: _padded(vocab, 3),
    # Gemma's GGUFs: no space prefix, BOS said explicitly.
    "gemma": lambda vocab: {
        **vocab,
        **SPM_IDS,
        "tokenizer.ggml.add_space_prefix": False,
        "tokenizer.ggml.add_bos_token": True,
    },
    # Phi-3 (recognised by its name): whitespace after most special tokens is dropped; and EOS
    # too (llama-tokenize adds special tokens only when the model wants BOS: so BOS as well).
    "phi3-eos": lambda vocab: {
        # llama.cpp's Phi-3 rules name <|endoftext|>, which a Phi-3 vocabulary has.
        **_appended(vocab, ["<|endoftext|>"], 0.0, TokenType.CONTROL),
        **SPM_IDS,
        "general.name": "Phi-3 Mini Instruct",
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.ggml.add_eos_token": True,
    },
}


@pytest.fixture(scope="session")
def spm_case(
    spm_vocab: dict, llama_tools: Path, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], tuple[dict, Reference]]:
    folder = tmp_path_factory.mktemp("spm")
    text_file = write_text(folder / "text.txt", sample_text(SPM_SPECIALS))

    def case(variant: str) -> tuple[dict, Reference]:
        gguf = write_gguf(folder / f"{variant}.gguf", SPM_VARIANTS[variant](spm_vocab))
        return read_metadata(gguf), llama_tokenize(llama_tools, gguf, text_file)

    return case


def spm_decoded(text: str, space_prefix: bool) -> str:
    """The text as llama.cpp's SentencePiece sees it: with add_space_prefix, every stretch of text
    after a special or user-defined token starts with an extra space."""
    if not space_prefix:
        return text
    pattern = "|".join(re.escape(token) for token in SPM_SPECIALS)
    return re.sub(f"({pattern})(?=.)(?!{pattern})", r"\1 ", text, flags=re.DOTALL)


@pytest.mark.parametrize("variant", SPM_VARIANTS)
def test_sentencepiece_matches_llama_cpp(variant: str, spm_case, tmp_path: Path):
    metadata, reference = spm_case(variant)
    text = sample_text(SPM_SPECIALS)
    tokenizer = build_tokenizer(metadata)
    assert ids_of(tokenizer, text) == reference.ids
    # Byte fallback was exercised: emoji and Arabic are not in the vocabulary.
    assert any(tokenizer.id_to_token(i).startswith("<0x") for i in reference.ids)

    config = tokenizer_config(metadata, {"max_position_embeddings": 4096})
    specials = special_token_ids(metadata)
    assert config["add_bos_token"] == (reference.ids[0] == specials["bos"])
    assert config["add_eos_token"] == (reference.ids[-1] == specials["eos"])
    assert [specials["bos"]] == reference.info["BOS"]
    assert [specials["eos"]] == reference.info["EOS"]
    assert [specials["unknown"]] == reference.info["UNK"]
    assert eog_token_ids(metadata) == reference.info["EOG"]

    streamed = check_transformers_and_mlx_lm(tokenizer, metadata, tmp_path / "hf", text, reference)
    if variant == "phi3-eos":  # whitespace after all but <unk>, <s> and <|endoftext|> is dropped
        text = re.sub(r"(<\|im_start\|>|<\|im_end\|>|<tool>|</tool>)\s+", r"\1", text)
    expected = spm_decoded(text, metadata.get("tokenizer.ggml.add_space_prefix", True))
    body = without_bos_eos(reference.ids, config)
    assert tokenizer.decode(body, skip_special_tokens=False) == expected
    assert streamed == expected


# llama.cpp's test vocabularies: real models' (Llama 2, Phi-3, Baichuan; Llama 3, Qwen2 and 3.5,
# DeepSeek, Falcon, GPT-2, MPT, StarCoder, Refact, Command-R), which its source tree holds.
# Gemma 4's has a test of its own below (its 262k tokens take a while to read).
REAL_VOCABULARIES = [
    *("llama-spm", "phi-3", "baichuan", "llama-bpe", "qwen2", "qwen35", "deepseek-llm"),
    *("deepseek-coder", "falcon", "gpt-2", "mpt", "starcoder", "refact", "command-r"),
]


@pytest.mark.parametrize("name", REAL_VOCABULARIES)
def test_real_vocabularies(name: str, llama_tools: Path, tmp_path: Path):
    """llama.cpp's test strings and ours, with some of the vocabulary's special tokens among them.
    The files are in llama.cpp's source tree, which scripts/build_llama_tools.sh keeps next to
    the tools."""
    found = sorted(llama_tools.parent.glob(f"work/*/llama.cpp/models/ggml-vocab-{name}.gguf"))
    if not found:
        pytest.fail(f"llama.cpp's ggml-vocab-{name}.gguf is not under {llama_tools.parent}/work")
    gguf = found[-1]
    metadata = read_metadata(gguf)
    inp = Path(f"{gguf}.inp")
    strings = inp.read_text().split("\n__ggml_vocab_test__\n") if inp.exists() else []
    kinds = zip(
        metadata["tokenizer.ggml.tokens"], metadata["tokenizer.ggml.token_type"], strict=True
    )
    specials = [t for t, kind in kinds if kind in (TokenType.CONTROL, TokenType.USER_DEFINED)][:6]
    parts = "\n".join((*strings, PROSE)).split("\n\n")
    text = "\n\n".join(
        specials[i % len(specials)] + part if specials and i % 3 == 0 else part
        for i, part in enumerate(parts)
    )
    reference = llama_tokenize(llama_tools, gguf, write_text(tmp_path / "text.txt", text))
    assert ids_of(build_tokenizer(metadata), text) == reference.ids
    assert eog_token_ids(metadata) == reference.info["EOG"]


def test_gemma4_through_transformers_and_mlx_lm(llama_tools: Path, tmp_path: Path):
    """Gemma 4's BPE on ▁-spaced text (llama.cpp's real vocabulary and test strings) as the
    server loads it: llama.cpp's ids and end tokens, through transformers too, and mlx-lm's
    SentencePiece-style streaming detokenizer, which keeps a leading space (there is no space
    prefix to take off), gives the text back."""
    (gguf,) = llama_tools.parent.glob("work/*/llama.cpp/models/ggml-vocab-gemma-4.gguf")
    metadata = read_metadata(gguf)
    strings = Path(f"{gguf}.inp").read_text().split("\n__ggml_vocab_test__\n")
    specials = ("<|turn>", "<turn|>", "<|tool_call>", "<tool_call|>", "<|channel>")
    text = "\n\n".join(strings) + sample_text(specials)
    reference = llama_tokenize(llama_tools, gguf, write_text(tmp_path / "text.txt", text))
    tokenizer = build_tokenizer(metadata)
    assert ids_of(tokenizer, text) == reference.ids
    assert eog_token_ids(metadata) == reference.info["EOG"]
    streamed = check_transformers_and_mlx_lm(tokenizer, metadata, tmp_path / "hf", text, reference)
    assert streamed == text
    assert "</s>" not in _split_out_special(metadata)  # a normal token in Gemma 4


def _split_out_special(metadata: dict) -> list[str]:
    from inference.conversion.gguf_tokenizer import _split_out, read_vocab

    return _split_out(read_vocab(metadata), metadata)[0]


def test_sentencepiece_scales_to_large_vocabularies():
    """Merges come from splitting each token, not from pairing tokens: a Gemma-sized vocabulary
    (256k) builds in seconds."""
    import random
    import time

    letters = "abcdefghijklmnopqrstuvwxyzäöüéèñçßабвгдежзиклмнопрстуфхцчшщыэюя▁"
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), *letters]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL, *[TokenType.BYTE] * 256]
    seen, chance = set(tokens), random.Random(0)
    while len(tokens) < 256_000:  # words of up to 12 letters, with all their prefixes
        word = "".join(chance.choices(letters, k=chance.randint(2, 12)))
        for end in range(2, len(word) + 1):
            if word[:end] not in seen:
                seen.add(word[:end])
                tokens.append(word[:end])
    metadata = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": [-float(i) for i in range(len(tokens))],
        "tokenizer.ggml.token_type": types + [TokenType.NORMAL] * (len(tokens) - len(types)),
    }
    started = time.perf_counter()
    tokenizer = build_tokenizer(metadata)
    elapsed = time.perf_counter() - started
    assert tokenizer.get_vocab_size() == len(tokens)
    assert elapsed < 30, f"{elapsed:.1f}s for {len(tokens)} tokens"


# --- byte-level BPE -------------------------------------------------------------------------------

BPE_SPECIALS = ("<|im_start|>", "<|im_end|>", "<repo_name>", "<file_sep>", "<|endoftext|>")
BPE_KEYS = (
    "tokenizer.ggml.model",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.padding_token_id",
)  # and no add_bos_token: each pre-tokenizer name's own default applies
PLACEHOLDER = "pre-tokenizer-placeholder"


@pytest.fixture(scope="session")
def smollm_vocab(demo_gguf: Path) -> dict:
    metadata = read_metadata(demo_gguf)
    return {key: metadata[key] for key in BPE_KEYS}


def _gguf_string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def _renamed(template: bytes, pre: str) -> bytes:
    """The template GGUF with another tokenizer.ggml.pre. Writing ~100k strings with GGUFWriter
    takes a third of a second; once per name would take half a minute."""
    string_type = struct.pack("<I", 8)  # GGUF_TYPE_STRING
    key = _gguf_string("tokenizer.ggml.pre") + string_type
    old = key + _gguf_string(PLACEHOLDER)
    assert template.count(old) == 1
    return template.replace(old, key + _gguf_string(pre))


@pytest.fixture(scope="session")
def bpe_references(
    smollm_vocab: dict, llama_tools: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Reference]:
    """llama-tokenize's answer for the demo vocabulary under every supported pre-tokenizer name."""
    folder = tmp_path_factory.mktemp("bpe")
    text_file = write_text(folder / "text.txt", sample_text(BPE_SPECIALS))
    metadata = {**smollm_vocab, "tokenizer.ggml.pre": PLACEHOLDER}
    template = write_gguf(folder / "template.gguf", metadata).read_bytes()

    def run(name: str) -> tuple[str, Reference]:
        gguf = folder / f"{name}.gguf"
        gguf.write_bytes(_renamed(template, name))
        return name, llama_tokenize(llama_tools, gguf, text_file)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(run, PRE_TOKENIZERS))


@pytest.fixture(scope="session")
def bpe_tokenizer(smollm_vocab: dict) -> Callable[[str], tuple[dict, Tokenizer]]:
    built: dict[PreTokenizer, Tokenizer] = {}  # names that behave alike share one tokenizer

    def get(name: str) -> tuple[dict, Tokenizer]:
        metadata = {**smollm_vocab, "tokenizer.ggml.pre": name}
        pre = PRE_TOKENIZERS[name]
        if pre not in built:
            built[pre] = build_tokenizer(metadata)
        return metadata, built[pre]

    return get


@pytest.mark.parametrize("name", PRE_TOKENIZERS)
def test_bpe_matches_llama_cpp(name: str, bpe_references, bpe_tokenizer):
    reference = bpe_references[name]
    metadata, tokenizer = bpe_tokenizer(name)
    text = sample_text(BPE_SPECIALS)
    assert ids_of(tokenizer, text) == reference.ids
    config = tokenizer_config(metadata, {"max_position_embeddings": 4096})
    assert config["add_bos_token"] == PRE_TOKENIZERS[name].add_bos
    body = without_bos_eos(reference.ids, config)
    assert tokenizer.decode(body, skip_special_tokens=False) == text
    assert eog_token_ids(metadata) == reference.info["EOG"]


@pytest.mark.parametrize("name", ["smollm", "llama-bpe"])
def test_bpe_through_transformers_and_mlx_lm(name: str, bpe_references, bpe_tokenizer, tmp_path):
    metadata, tokenizer = bpe_tokenizer(name)
    text = sample_text(BPE_SPECIALS)
    streamed = check_transformers_and_mlx_lm(
        tokenizer, metadata, tmp_path / "hf", text, bpe_references[name]
    )
    assert streamed == text


def test_refusals_name_what_is_supported(smollm_vocab: dict):
    with pytest.raises(UnsupportedGGUF, match=r"pre-tokenizer 'nonsense' .*known: .*qwen2"):
        build_tokenizer({**smollm_vocab, "tokenizer.ggml.pre": "nonsense"})
    with pytest.raises(UnsupportedGGUF, match=r"tokenizer model 't5' .*'llama' SentencePiece"):
        build_tokenizer({**smollm_vocab, "tokenizer.ggml.model": "t5"})
