"""A loaded model's own idle TTL (Ollama's keep_alive): which models the pool says are idle,
and when the next one will be, with and without the engine's TTL."""

from __future__ import annotations

import time

import pytest

from inference.engine.pool import LoadedModel, ModelPool
from inference.engine.types import ModelSpec

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent


def pool_of(*models: LoadedModel) -> ModelPool:
    pool = ModelPool(2**30)
    for model in models:
        pool._models[model.spec.model_id] = model
    return pool


def loaded(model_id: str, idle: float, pinned: bool = False, active: int = 0) -> LoadedModel:
    spec = ModelSpec(model_id=model_id, location="/nowhere", pinned=pinned)
    model = LoadedModel(spec, None, None, {}, 1, 1, active=active)
    model.last_used = time.monotonic() - idle
    return model


def test_keep_alive_overrides_the_engines_ttl_either_way():
    pool = pool_of(loaded("a", idle=30), loaded("b", idle=30), loaded("c", idle=30))
    assert pool.idle_models(0) == []  # no engine TTL: nothing idles out
    assert pool.keep_alive("a", 0) and pool.keep_alive("b", 10) and pool.keep_alive("c", -1)
    assert sorted(pool.idle_models(0)) == ["a", "b"]
    assert sorted(pool.idle_models(3600)) == ["a", "b"]  # c: never, whatever the engine says
    assert pool.keep_alive("b", None)  # the engine's again
    assert pool.idle_models(3600) == ["a"]
    assert not pool.keep_alive("not-loaded", 0)


def test_busy_and_pinned_models_stay():
    pool = pool_of(loaded("busy", idle=30, active=1), loaded("pinned", idle=30, pinned=True))
    pool.keep_alive("busy", 0)
    pool.keep_alive("pinned", 0)
    assert pool.idle_models(1) == []


def test_next_deadline_counts_each_models_own_ttl():
    pool = pool_of(loaded("a", idle=0))
    assert pool.next_idle_deadline(0) is None
    pool.keep_alive("a", 5)
    deadline = pool.next_idle_deadline(0)
    assert deadline is not None and 4 < deadline - time.monotonic() <= 5
