"""Operating the running server: pool status, warming and unloading models.

The API views, manage.py's commands (through the API) and the admin's actions all come here.
"""

from __future__ import annotations

import asyncio
import time

from catalog.models import CatalogModel
from inference.engine.types import EngineError
from inference.protocol.errors import model_not_found
from inference.runtime import get_engine, get_supervisor
from inference.serving.drain import drain
from inference.serving.errors import api_error


async def _on_engine(run):
    try:
        return await asyncio.wrap_future(get_engine().call(run))
    except EngineError as exc:
        raise api_error(exc) from None


async def _catalog_entry(model_id: str, enabled_only: bool) -> CatalogModel:
    entries = CatalogModel.objects.filter(public_id=model_id)
    if enabled_only:
        entries = entries.filter(enabled=True)
    entry = await entries.afirst()
    if entry is None:
        raise model_not_found(model_id)
    return entry


async def warm_model(model_id: str) -> dict:
    entry = await _catalog_entry(model_id, enabled_only=True)
    spec = entry.spec()
    return await _on_engine(lambda engine: engine.warm(spec))


async def unload_model(model_id: str) -> dict:
    await _catalog_entry(model_id, enabled_only=False)
    unloaded = await _on_engine(lambda engine: engine.unload(model_id))
    return {"id": model_id, "unloaded": unloaded}


async def pool_status() -> dict:
    status = await _on_engine(lambda engine: engine.status())
    loaded = {m["id"] for m in status["models"]}
    status["catalog"] = [
        {
            "id": entry.public_id,
            "enabled": entry.enabled,
            "loaded": entry.public_id in loaded,
            "pinned": entry.pinned,
            "preload": entry.preload,
        }
        async for entry in CatalogModel.objects.all()
    ]
    return status


def engine_health() -> dict:
    """The engine's state for /health, /health/ready and the dashboard, read without waiting
    for the engine thread."""
    supervisor = get_supervisor()
    engine = supervisor.engine
    not_ready = []
    if drain.draining:
        not_ready.append("shutting down")
    if supervisor.restarting:
        not_ready.append("engine restarting")
    elif not engine.alive:
        not_ready.append("engine not running")
    return {
        "not_ready": not_ready,
        "draining": drain.draining,
        "running": engine.running,
        "queued": supervisor.admission.queued(engine.decoding),
        "loaded_models": engine.pool.loaded_ids(),
        "restarts": supervisor.restarts,
        "last_failure": supervisor.last_failure,
    }


def inject_fault(kind: str, seconds: float) -> str:
    """Crashes the engine thread, or wedges it for `seconds`, without waiting for it."""
    engine = get_engine()
    if kind == "crash":
        engine.request_crash()
    elif kind == "stall" and seconds > 0:
        engine.call(lambda engine: time.sleep(seconds))
    else:
        raise ValueError(kind)
    return kind


async def preload_models() -> list[str]:
    """Loads every enabled catalog model marked preload; returns the ids that failed."""
    failed = []
    async for entry in CatalogModel.objects.filter(enabled=True, preload=True):
        try:
            await warm_model(entry.public_id)
        except Exception:
            failed.append(entry.public_id)
    return failed
