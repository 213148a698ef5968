"""The process-level engine: created on first use, shared by every request of this process,
and kept healthy by a supervisor."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from django.conf import settings

from inference.engine.config import EngineConfig

if TYPE_CHECKING:
    from inference.engine.supervisor import Supervisor
    from inference.engine.worker import Engine

log = logging.getLogger(__name__)
_supervisor: Supervisor | None = None
_lock = threading.Lock()


def get_supervisor() -> Supervisor:
    global _supervisor
    with _lock:
        if _supervisor is None:
            # Imported here: importing the worker imports MLX, which only the engine needs.
            from inference.engine.supervisor import Supervisor

            log.info("BLAS: %s (%s)", settings.BLAS.library or "MLX's own", settings.BLAS.reason)
            _supervisor = Supervisor(engine_config(), settings.ENGINE_STALL_TIMEOUT)
        return _supervisor


def get_engine() -> Engine:
    """The engine serving now (a new one after a restart)."""
    return get_supervisor().engine


def current_supervisor() -> Supervisor | None:
    """The supervisor if the engine has started; never starts it (for metrics scrapes)."""
    return _supervisor


def stop_engine() -> None:
    global _supervisor
    with _lock:
        if _supervisor is not None:
            _supervisor.stop()
            _supervisor = None


def engine_config() -> EngineConfig:
    return EngineConfig(
        pool_budget_bytes=settings.POOL_MEMORY_BUDGET,
        max_batch=settings.ENGINE_MAX_BATCH,
        prefill_batch=settings.ENGINE_PREFILL_BATCH,
        prefill_step=settings.ENGINE_PREFILL_STEP,
        prompt_cache_bytes=settings.PROMPT_CACHE_BYTES,
        idle_ttl=settings.MODEL_IDLE_TTL,
        max_queued=settings.MAX_QUEUED_REQUESTS,
    )
