"""The process-level engine: created on first use, shared by every request of this process,
kept healthy by a supervisor, and reached only through its EngineHandle."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from django.conf import settings

from inference.engine.config import EngineConfig
from inference.engine.handle import EngineHandle

if TYPE_CHECKING:
    from inference.engine.state import EngineHealth
    from inference.engine.supervisor import Supervisor

log = logging.getLogger(__name__)
_supervisor: Supervisor | None = None
_handle: EngineHandle | None = None
_lock = threading.Lock()


def engine_handle() -> EngineHandle:
    """The handle to this process's engine, starting it on first use."""
    global _supervisor, _handle
    with _lock:
        if _handle is None:
            # Imported here: importing the supervisor imports MLX, which only the engine needs.
            from inference.engine.supervisor import Supervisor

            log.info("BLAS: %s (%s)", settings.BLAS.library or "MLX's own", settings.BLAS.reason)
            _supervisor = Supervisor(
                engine_config(),
                settings.ENGINE_STALL_TIMEOUT,
                group_timeout=settings.DISTRIBUTED_TIMEOUT,
            )
            _handle = EngineHandle(_supervisor)
        return _handle


def current_health() -> EngineHealth | None:
    """The engine's health if it has started; never starts it (for metrics scrapes)."""
    handle = _handle
    return None if handle is None else handle.health()


def get_supervisor() -> Supervisor:
    """The machinery behind the handle, for tests and drills only."""
    engine_handle()
    assert _supervisor is not None
    return _supervisor


def stop_engine() -> None:
    global _supervisor, _handle
    with _lock:
        if _handle is not None:
            _handle.stop()
            _supervisor = _handle = None


def engine_config() -> EngineConfig:
    return EngineConfig(
        pool_budget_bytes=settings.POOL_MEMORY_BUDGET,
        max_batch=settings.ENGINE_MAX_BATCH,
        prefill_share=settings.ENGINE_PREFILL_SHARE,
        prefill_step=settings.ENGINE_PREFILL_STEP,
        max_request_prompt_tokens=settings.MAX_REQUEST_PROMPT_TOKENS,
        prompt_cache_bytes=settings.PROMPT_CACHE_BYTES,
        prefix_cache_dir=str(settings.PREFIX_CACHE_DIR),
        prefix_cache_disk_bytes=settings.PREFIX_CACHE_DISK_BYTES,
        prefix_cache_disk_min_tokens=settings.PREFIX_CACHE_DISK_MIN_TOKENS,
        idle_ttl=settings.MODEL_IDLE_TTL,
        max_queued=settings.MAX_QUEUED_REQUESTS,
        batch_share=settings.ENGINE_BATCH_SHARE,
        batch_beside=settings.ENGINE_BATCH_SLOTS,
        max_queued_batch=settings.MAX_QUEUED_BATCH_REQUESTS,
        cpu_kernels=settings.CPU_KERNELS,
        cpu_kernel_threads=settings.CPU_KERNEL_THREADS,
        compute_format_verdicts=settings.COMPUTE_FORMAT_VERDICTS,
    )
