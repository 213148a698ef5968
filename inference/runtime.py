"""The process-level engine: created on first use, shared by every request of this process."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from django.conf import settings

from inference.engine.config import EngineConfig

if TYPE_CHECKING:
    from inference.engine.worker import Engine

log = logging.getLogger(__name__)
_engine: Engine | None = None
_lock = threading.Lock()


def get_engine() -> Engine:
    global _engine
    with _lock:
        if _engine is None:
            # Imported here: importing the worker imports MLX, which only the engine needs.
            from inference.engine.worker import Engine

            log.info("BLAS: %s (%s)", settings.BLAS.library or "MLX's own", settings.BLAS.reason)
            _engine = Engine(engine_config())
        return _engine


def engine_config() -> EngineConfig:
    return EngineConfig(
        pool_budget_bytes=settings.POOL_MEMORY_BUDGET,
        max_batch=settings.ENGINE_MAX_BATCH,
        prefill_batch=settings.ENGINE_PREFILL_BATCH,
        prefill_step=settings.ENGINE_PREFILL_STEP,
        prompt_cache_bytes=settings.PROMPT_CACHE_BYTES,
        idle_ttl=settings.MODEL_IDLE_TTL,
    )
