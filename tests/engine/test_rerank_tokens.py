"""Rerank pairs as the engine reads them (engine/rerank/tokens.py), checked against each
format's own definition: the tokenizer's pair encoding and truncation for cross-encoders, the
model card's concatenation for Qwen3-Reranker's prompt; and the scores of a padded batch."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from tokenizers import Tokenizer

from inference.engine.rerank.load import load_reranker
from inference.engine.rerank.tokens import ASSISTANT, SYSTEM, YesNoPairs, pair_encoder
from inference.engine.types import EngineError
from tests.support.rerank_models import build_cross_encoder

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

QUERY = "where did the cat sit"
DOCUMENTS = ["the cat sat on the mat", "hello", "the quick brown fox jumps over the lazy dog " * 9]


@pytest.fixture(scope="module", params=[False, True], ids=["bert", "xlm-roberta"])
def cross_encoder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_cross_encoder(tmp_path_factory.mktemp("cross") / "model", roberta=request.param)


def test_cross_encoder_pairs_are_the_tokenizer_s_own(cross_encoder: Path) -> None:
    tokenizer = Tokenizer.from_file(str(cross_encoder / "tokenizer.json"))
    pairs = pair_encoder(cross_encoder)
    for limit in (512, 20):
        # The folder's positions cap every limit: BERT's 128, XLM-R's 130 less its padding offset.
        tokenizer.enable_truncation(min(limit, 128), strategy="only_second")
        expected = [tuple(tokenizer.encode(QUERY, d).ids) for d in DOCUMENTS]
        assert pairs(QUERY, DOCUMENTS, limit, "") == expected
    with pytest.raises(EngineError) as refused:
        pairs("the quick brown fox " * 10, ["x"], 20, "")
    assert refused.value.param == "query"


def test_batched_scores_are_each_pair_alone(cross_encoder: Path) -> None:
    model, _, _ = load_reranker(str(cross_encoder))
    rows = pair_encoder(cross_encoder)(QUERY, DOCUMENTS, 128, "")
    alone = [
        float(model.scores(mx.array([r]), mx.ones((1, len(r))), mx.array([len(r)]))[0])
        for r in rows
    ]
    longest = max(map(len, rows))
    ids = np.zeros((len(rows), longest), dtype=np.int32)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
    lengths = mx.array([len(r) for r in rows])
    mask = (mx.arange(longest)[None, :] < lengths[:, None]).astype(mx.float32)
    batched = np.array(model.scores(mx.array(ids), mask, lengths))
    np.testing.assert_allclose(batched, alone, atol=1e-5)


class WordTokenizer:
    """One id per character: the model card's concatenation is easy to check by hand."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]


def test_yes_no_prompt_is_the_model_card_s() -> None:
    pairs = YesNoPairs(WordTokenizer())
    text = SYSTEM + "<Instruct>: find cats\n<Query>: q\n<Document>: the cat" + ASSISTANT
    assert pairs("q", ["the cat"], 10_000, "find cats") == [tuple(ord(c) for c in text)]
    default = pairs("q", ["d"], 10_000, "")[0]
    assert "Given a web search query" in "".join(map(chr, default))
    # Over the limit the document's end goes; the markers after it stay.
    limit = len(SYSTEM) + len(ASSISTANT) + len("<Instruct>: i\n<Query>: q\n<Document>: ") + 3
    (cut,) = pairs("q", ["abcdef"], limit, "i")
    assert len(cut) == limit and "".join(map(chr, cut)).endswith("abc" + ASSISTANT)
    with pytest.raises(EngineError):
        pairs("q" * limit, ["d"], limit, "i")
