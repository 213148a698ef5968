"""The embedding engine without HTTP: pooling, the folder's pooling declaration, and an
embedding request's batches taking turns with a chat model's decode steps."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from inference.adapters import FamilyProfile, get_adapter
from inference.engine.config import EngineConfig
from inference.engine.embedding.pooling import folder_pooling, l2_normalize, pool
from inference.engine.types import (
    Done,
    Embedded,
    EmbeddingJob,
    Failed,
    ModelSpec,
    SamplingParams,
)
from inference.engine.worker import Engine
from inference.serving.prompts import ChatPrompt
from tests.support.helpers import prepared_job

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

HIDDEN = mx.array(
    [
        [[1.0, 0.0], [3.0, 2.0], [9.0, 9.0]],  # two real tokens, one pad
        [[2.0, 2.0], [4.0, 0.0], [6.0, 1.0]],  # three real tokens
    ]
)
LENGTHS = mx.array([2, 3])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("cls", [[1.0, 0.0], [2.0, 2.0]]),
        ("last", [[3.0, 2.0], [6.0, 1.0]]),
        ("mean", [[2.0, 1.0], [4.0, 1.0]]),
    ],
)
def test_pooling_never_reads_pads(mode: str, expected: list) -> None:
    np.testing.assert_allclose(np.array(pool(HIDDEN, LENGTHS, mode)), expected)


def test_l2_normalize() -> None:
    unit = np.array(l2_normalize(mx.array([[3.0, 4.0], [0.0, 0.0]])))
    np.testing.assert_allclose(unit, [[0.6, 0.8], [0.0, 0.0]])


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"pooling_mode_mean_tokens": True}, "mean"),
        ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}, "cls"),
        ({"pooling_mode_lasttoken": True}, "last"),
        ({}, None),
        (None, None),
    ],
)
def test_folder_pooling(tmp_path: Path, flags: dict | None, expected: str | None) -> None:
    if flags is not None:
        (tmp_path / "1_Pooling").mkdir()
        (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(flags))
    assert folder_pooling(tmp_path) == expected


@pytest.fixture
def small_step_engine() -> Iterator[Engine]:
    """An engine whose embedding batches hold at most 64 padded tokens."""
    engine = Engine(EngineConfig(prefill_step=64))
    yield engine
    engine.stop()


def test_embedding_batches_take_turns_with_decoding(
    small_step_engine: Engine, tiny_spec: ModelSpec, encoder_embedder_dir: Path
) -> None:
    """A request of many inputs runs over many steps; the chat stream decodes between them."""
    order: list[str] = []
    lock = threading.Lock()
    answers: queue.SimpleQueue = queue.SimpleQueue()

    def record(kind: str):
        def sink(event) -> None:
            with lock:
                order.append(f"{kind}:{type(event).__name__}")
            if isinstance(event, Done | Failed | Embedded):
                answers.put(event)

        return sink

    chat = prepared_job(
        tiny_spec,
        get_adapter(FamilyProfile(adapter="chatml")),
        ChatPrompt([{"role": "user", "content": "Hi"}]),
        SamplingParams(temperature=0, max_tokens=200, logit_bias={2: -100}),
        record("chat"),
    )
    spec = ModelSpec("bert", str(encoder_embedder_dir), purpose="embedding")
    for model in (spec, tiny_spec):  # both loaded: neither waits for the loader thread
        small_step_engine.call(lambda engine, model=model: engine.warm(model)).result(timeout=60)
    small_step_engine.submit(chat)
    inputs = ["the quick brown fox jumps over the lazy dog"] * 40  # 11 tokens: 5 rows a batch
    small_step_engine.submit(EmbeddingJob(spec, inputs, record("embed")))
    events = [answers.get(timeout=120), answers.get(timeout=120)]
    assert any(isinstance(e, Embedded) for e in events), events
    embedded = next(e for e in events if isinstance(e, Embedded))
    assert len(embedded.vectors) == 40 and embedded.prompt_tokens == 40 * 11
    with lock:
        start = order.index("chat:Delta")
        between = order[start : order.index("embed:Embedded")].count("chat:Delta")
    # 40 rows at 5 a batch: 8 batches, each one engine step with one decode step beside it.
    assert between >= 6, order


def test_all_minilm_matches_sentence_transformers(demo_embedding: Path) -> None:
    """The real all-MiniLM-L6-v2: mean pooling from its 1_Pooling folder, unit vectors, and the
    similarity sentence-transformers' documentation gives for these two sentences (0.7553)."""
    engine = Engine(EngineConfig())
    try:
        spec = ModelSpec("minilm", str(demo_embedding), purpose="embedding")
        answers: queue.SimpleQueue = queue.SimpleQueue()
        texts = ["A man is eating food.", "A man is eating a piece of bread.", "A monkey drums."]
        engine.submit(EmbeddingJob(spec, texts, answers.put))
        answer = answers.get(timeout=120)
    finally:
        engine.stop()
    assert isinstance(answer, Embedded), answer
    vectors = np.array(answer.vectors)
    assert vectors.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert abs(float(vectors[0] @ vectors[1]) - 0.7553) < 0.005
    assert float(vectors[0] @ vectors[2]) < 0.3


def test_fast_gelu_is_the_exact_gelu():
    import mlx.core as mx
    import mlx.nn as nn

    from inference.engine import fastmath

    x = mx.linspace(-12.0, 12.0, 100_001)
    assert fastmath.warm_up()
    assert mx.abs(fastmath.gelu(x) - nn.gelu(x)).max().item() < 2e-6
