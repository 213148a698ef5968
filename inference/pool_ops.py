"""The pool as the catalog's admin reaches it (catalog/pool_seam.py): the engine's snapshot for
what is loaded, serving's warm and unload for the actions, an APIError turned into the seam's
PoolRefused. Registered by the inference app when Django starts (inference/apps.py)."""

from __future__ import annotations

from collections.abc import Sequence

from asgiref.sync import async_to_sync

from catalog.pool_seam import LoadedModel, PoolRefused
from inference import runtime
from inference.protocol.errors import APIError
from inference.serving.control import unload_model, warm_model


class EnginePool:
    """catalog.pool_seam.PoolOps over this process's engine."""

    def loaded(self) -> Sequence[LoadedModel]:
        # The engine's snapshot: never waits for it, never starts it.
        health = runtime.current_health()
        return health.models if health else ()

    def warm(self, model_id: str) -> dict:
        try:
            return async_to_sync(warm_model)(runtime.engine_handle(), model_id)
        except APIError as exc:
            raise PoolRefused(exc.message) from exc

    def unload(self, model_id: str) -> dict:
        try:
            return async_to_sync(unload_model)(runtime.engine_handle(), model_id)
        except APIError as exc:
            raise PoolRefused(exc.message) from exc
