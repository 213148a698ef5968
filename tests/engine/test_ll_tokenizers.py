"""llguidance's tokenizer is built once per vocabulary (it takes about a second), and shared
by every model whose tokenizer is the same, whatever folder it was read from."""

from __future__ import annotations

import shutil

import pytest
from transformers import AutoTokenizer

from inference.engine.constraints import compile_grammar, ll_tokenizer_of

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent


def test_one_vocabulary_read_twice_shares_one_ll_tokenizer(smollm_dir, tmp_path):
    copy = shutil.copytree(smollm_dir, tmp_path / "copy")
    first = ll_tokenizer_of(AutoTokenizer.from_pretrained(smollm_dir))
    second = ll_tokenizer_of(AutoTokenizer.from_pretrained(copy))
    assert second is first
    # and it is the tokenizer a grammar compiles against
    matcher = compile_grammar(first, '%llguidance {}\nstart: "Paris"')
    tokens = AutoTokenizer.from_pretrained(copy).encode("Paris", add_special_tokens=False)
    assert all(matcher.consume_token(t) for t in tokens) and matcher.is_accepting()


def test_another_vocabulary_or_end_token_gets_its_own(smollm_dir, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(smollm_dir)
    shared = ll_tokenizer_of(tokenizer)
    tokenizer.add_tokens(["<|weather|>"])
    grown = ll_tokenizer_of(tokenizer)
    assert grown is not shared and grown.vocab_size == shared.vocab_size + 1
    other_end = AutoTokenizer.from_pretrained(smollm_dir, eos_token="<|im_start|>")
    assert ll_tokenizer_of(other_end) is not shared
