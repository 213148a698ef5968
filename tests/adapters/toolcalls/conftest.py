import pytest


@pytest.fixture(scope="session")
def hf_tokenizer(smollm_dir):
    """SmolLM2's Hugging Face tokenizer: what grammars are checked against (a family's own
    special tokens are added by the tests that need them)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(smollm_dir))
