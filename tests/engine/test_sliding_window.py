"""Prefix reuse for sliding-window models (Gemma 2/3/4): their local layers keep a rotating
cache that cannot be cut back once a conversation passes the window, so the answer's entry
(which the next turn re-renders, so it must be cut) is useless to them. What the runner keeps
at the end of each prompt's reading is what the next turn extends: a conversation longer than
the window reuses its history turn after turn, with the tokens a cold read gives."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlx_lm.models.cache import RotatingKVCache

from inference.engine.batching import ModelRunner
from inference.engine.config import EngineConfig
from inference.engine.pool import LoadedModel, ModelPool
from inference.engine.types import ModelSpec
from tests.engine.jobs import greedy, make_sequence
from tests.engine.test_runner import run
from tests.support.helpers import build_tiny_model

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

WINDOW = 16

GEMMA3 = {
    "model_type": "gemma3_text",
    "head_dim": 16,
    "query_pre_attn_scalar": 16,
    "sliding_window": WINDOW,
    "sliding_window_pattern": 2,  # layer 0 local (rotating), layer 1 global
    "tie_word_embeddings": False,
    "max_position_embeddings": 4096,
}


@pytest.fixture(scope="module")
def gemma(smollm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    path = tmp_path_factory.mktemp("sliding") / "tiny-gemma3"
    build_tiny_model(smollm_dir, path, **GEMMA3)
    return ModelPool(2**30).get(ModelSpec(model_id="tiny-gemma3", location=str(path)))


def ids_of(loaded: LoadedModel, text: str) -> list[int]:
    return list(loaded.tokenizer.encode(text))


def cold(loaded: LoadedModel, ids: list[int], n: int) -> list[int]:
    runner = ModelRunner(loaded, EngineConfig(prompt_cache_bytes=0))
    (outcome,) = run(runner, make_sequence(loaded, ids, greedy(n)))
    return outcome.tokens


def test_the_model_has_a_rotating_cache_that_cannot_be_cut_past_its_window(gemma):
    caches = gemma.model.make_cache()
    assert any(isinstance(c, RotatingKVCache) for c in caches)
    local = next(c for c in caches if isinstance(c, RotatingKVCache))
    assert local.max_size == WINDOW


def test_a_conversation_past_the_window_reuses_its_history_every_turn(gemma):
    runner = ModelRunner(gemma, EngineConfig())
    history = ids_of(gemma, " ".join(f"line {i} of the file" for i in range(12)))
    assert len(history) > 3 * WINDOW
    previous = 0
    for turn in range(4):
        (outcome,) = run(runner, make_sequence(gemma, history, greedy(4)))
        if turn:
            # Everything up to the previous turn's prompt, less the token it fed itself.
            assert outcome.done.cached_tokens == previous - 1, turn
        assert outcome.tokens == cold(gemma, history, 4), turn
        previous = len(history)
        # The next turn: this answer re-rendered as text, then a tool result of its own.
        answer = gemma.tokenizer.decode(outcome.tokens)
        history = history + ids_of(gemma, f" {answer} result {turn}: " + "ok " * 10)
