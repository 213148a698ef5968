"""The process-level engine: created on first use, shared by every request of this process."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from django.conf import settings

if TYPE_CHECKING:
    from inference.engine.worker import Engine

_engine: Engine | None = None
_lock = threading.Lock()


def get_engine() -> Engine:
    global _engine
    with _lock:
        if _engine is None:
            # Imported here: importing the worker imports MLX, which only the engine needs.
            from inference.engine.pool import ModelPool
            from inference.engine.worker import Engine

            _engine = Engine(ModelPool(settings.POOL_MEMORY_BUDGET))
        return _engine


def shutdown_engine() -> None:
    global _engine
    with _lock:
        if _engine is not None:
            _engine.stop()
            _engine = None
