"""A model whose tokenizer outgrew its embedding: ids past the embedding's rows are refused
as outside the vocabulary (before, MLX's gather read past the rows: garbage tokens, or a
segfault), and what the tokenizer and the rows both hold still generates."""

from __future__ import annotations

from pathlib import Path

import pytest

from inference.engine.batching import ModelRunner
from inference.engine.config import EngineConfig
from inference.engine.pool import LoadedModel, ModelPool, embedding_rows
from inference.engine.types import EngineError, ModelSpec, SamplingParams
from tests.engine.jobs import greedy, make_sequence
from tests.support.helpers import build_tiny_model

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

ROWS = 1000  # SmolLM2's tokenizer holds 49,152 tokens


@pytest.fixture(scope="module")
def short_rows(smollm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    path = tmp_path_factory.mktemp("rows") / "tiny-short-rows"
    build_tiny_model(smollm_dir, path, vocab_size=ROWS)
    return ModelPool(2**30).get(ModelSpec(model_id="tiny-short-rows", location=str(path)))


def test_the_bound_is_the_embedding_rows_where_the_tokenizer_holds_more(short_rows):
    assert len(short_rows.vocab) > ROWS
    assert short_rows.vocab_size == ROWS


@pytest.mark.parametrize("bad", [ROWS, 45_000])
def test_a_prompt_past_the_rows_is_refused(short_rows, bad):
    with pytest.raises(EngineError, match=f"outside the vocabulary \\(size {ROWS}\\)"):
        make_sequence(short_rows, [1, 5, bad], greedy(4))


def test_a_bias_past_the_rows_is_refused(short_rows):
    params = SamplingParams(temperature=0, max_tokens=4, logit_bias={ROWS + 3: 1.0})
    with pytest.raises(EngineError, match=f"logit_bias .* \\(size {ROWS}\\)"):
        make_sequence(short_rows, [1, 5], params)


def test_ids_under_the_rows_generate(short_rows):
    sequence = make_sequence(short_rows, [1, 5, ROWS - 1], greedy(3))
    runner = ModelRunner(short_rows, EngineConfig(prompt_cache_bytes=0))
    runner.add(sequence)
    for _ in range(50):
        if sequence.finished:
            break
        runner.step()
    assert sequence.finished and sequence.completion_tokens == 3
    assert all(0 <= t < ROWS for t in sequence.fed)


@pytest.mark.parametrize(
    ("config", "rows"),
    [
        ({"vocab_size": 32000}, 32000),
        ({"text_config": {"vocab_size": 262208}}, 262208),
        ({}, 0),
        ({"vocab_size": None, "text_config": None}, 0),
    ],
)
def test_embedding_rows_from_the_config(config, rows):
    assert embedding_rows(config) == rows
