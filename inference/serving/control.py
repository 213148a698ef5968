"""Operating the running server: health, pool status, warming and unloading models.

The /health and /control views, the dashboard, manage.py's commands (through the API) and the
admin's actions all come here. Every reader of engine state renders the one EngineHealth
snapshot; only warm and unload wait for the engine thread.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from operator import methodcaller
from typing import TYPE_CHECKING, TypeVar

from django.conf import settings

from catalog.models import CatalogModel
from inference.engine.handle import EngineHandle
from inference.engine.state import EngineHealth, ModelState, PrefixDiskState
from inference.engine.types import EngineError
from inference.observability.history import history, sampler
from inference.protocol.errors import model_not_found
from inference.serving.drain import drain
from inference.serving.errors import api_error
from inference.serving.resolve import named_model

if TYPE_CHECKING:
    from inference.engine.worker import Engine

T = TypeVar("T")


async def _catalog_entry(model_id: str, enabled_only: bool) -> CatalogModel:
    """The row `model_id` names by id or alias, exactly as the API's doors resolve it
    (serving/resolve.py; the default for unknown ids aside: an operator's typo loads nothing)."""
    entries = CatalogModel.objects.select_related(*CatalogModel.RELATED)
    if enabled_only:
        entries = entries.filter(enabled=True)
    entry = await named_model(model_id, entries)
    if entry is None:
        raise model_not_found(model_id)
    return entry


async def _on_engine(engine: EngineHandle, run: Callable[[Engine], T]) -> T:
    # `run` is a methodcaller: in a distributed group every rank runs it (engine/lockstep.py).
    try:
        return await engine.call(run)
    except EngineError as exc:
        raise api_error(exc) from None


async def warm_model(engine: EngineHandle, model_id: str) -> dict:
    entry = await _catalog_entry(model_id, enabled_only=True)
    spec = entry.spec()
    return await _on_engine(engine, methodcaller("warm", spec))


async def unload_model(engine: EngineHandle, model_id: str) -> dict:
    entry = await _catalog_entry(model_id, enabled_only=False)
    unloaded = await _on_engine(engine, methodcaller("unload", entry.public_id))
    return {"id": entry.public_id, "unloaded": unloaded}


async def preload_models(engine: EngineHandle) -> list[str]:
    """Loads every enabled catalog model marked preload; returns the ids that failed."""
    failed = []
    async for entry in CatalogModel.objects.filter(enabled=True, preload=True):
        try:
            await warm_model(engine, entry.public_id)
        except Exception:
            failed.append(entry.public_id)
    return failed


def not_ready(health: EngineHealth) -> list[str]:
    """Why a load balancer should send this instance no traffic now (empty: ready)."""
    return (["shutting down"] if drain.draining else []) + health.problems


def blas_name() -> str | None:
    return settings.BLAS.library


def health_document(health: EngineHealth) -> dict:
    """GET /health."""
    return {
        "status": "unavailable" if not_ready(health) else "ok",
        "instance": settings.INSTANCE_NAME,
        "running_sequences": health.running,
        "queued_sequences": health.queued,
        "loaded_models": health.loaded_ids,
        # What each loaded model computes with: weights, KV cache, context.
        "models": {
            m.id: {
                "compute_format": m.compute_format,
                "weights": m.weights,  # what is stored, for the "stored" format
                "cpu_kernels": m.kernels,
                "activations": m.activations,
                # A GGUF import's Q6_K layers: 6-bit in the CPU kernels, or MLX 8-bit and why.
                "q6_k": m.q6k or None,
                "kv_cache": m.kv_cache,
                "context_length": m.context_length,
                # Speculative decoding since it loaded (engine/speculative.py, rewind.py).
                "speculation": {
                    "draft_tokens": m.draft_tokens,
                    "accepted_draft_tokens": m.accepted_draft_tokens,
                    "verify_steps": m.verify_steps,
                    "replayed_steps": m.replayed_steps,
                    "drafters": drafter_counts(m),
                    "mtp": m.mtp,
                },
            }
            for m in health.models
        },
        "engine_restarts": health.restarts,
        "last_engine_failure": health.last_failure,
        "draining": drain.draining,
        "blas": blas_name() or "mlx-bundled",
        "cpu_kernels": health.state.kernels,
        # rank, size, backend when this is rank 0 of an MLX group (engine/lockstep.py)
        "distributed": health.group,
        "prefix_cache_disk": prefix_disk_document(health.state.prefix_disk),
    }


def prefix_disk_document(disk: PrefixDiskState | None) -> dict | None:
    """The prefix cache's disk tier (None: off): what its folder holds, what was read and
    written since this process started."""
    if disk is None:
        return None
    return dataclasses.asdict(disk)


def model_document(model: ModelState) -> dict:
    return {
        "id": model.id,
        "bytes": model.bytes,
        "compute_format": model.compute_format,
        "weights": model.weights,  # what is stored, for the "stored" format
        "cpu_kernels": model.kernels,
        "format_reason": model.format_reason,
        "q6_k": model.q6k or None,  # what a GGUF import's Q6_K layers became
        "activations": model.activations,
        "kv_cache": model.kv_cache,
        "context_length": model.context_length,
        "pinned": model.pinned,
        "load_seconds": model.load_seconds,
        "idle_seconds": round(model.idle_seconds, 1),
        "active_sequences": model.active_sequences,
        "queued_sequences": model.queued_sequences,
        "tokens_per_second": model.tokens_per_second,
        "prefix_cache_bytes": model.prefix_cache_bytes,
        "prefix_disk_hits": model.prefix_disk_hits,
        "prefix_disk_tokens": model.prefix_disk_tokens,
        "draft_tokens": model.draft_tokens,
        "accepted_draft_tokens": model.accepted_draft_tokens,
        "verify_steps": model.verify_steps,
        "replayed_steps": model.replayed_steps,
        "drafters": drafter_counts(model),
        "mtp": model.mtp,
        "mtp_heads": model.mtp_heads,
    }


def drafter_counts(model) -> dict:
    """Draft tokens verified and kept, per drafter kind, since the model loaded."""
    return {
        kind: {"draft_tokens": drafted, "accepted_draft_tokens": kept}
        for kind, (drafted, kept) in sorted(model.drafters.items())
    }


async def pool_document(health: EngineHealth) -> dict:
    """GET /control/pool: the loaded models and the catalog beside them."""
    loaded = set(health.loaded_ids)
    return {
        "device": health.state.device,
        "budget_bytes": health.state.budget_bytes,
        "used_bytes": health.used_bytes,
        "running_sequences": health.running,
        "models": [model_document(m) for m in health.models],
        "catalog": [
            {
                "id": entry.public_id,
                "aliases": entry.aliases,  # `manage.py pool NAME` resolves them as the API does
                "enabled": entry.enabled,
                "loaded": entry.public_id in loaded,
                "pinned": entry.pinned,
                "preload": entry.preload,
            }
            async for entry in CatalogModel.objects.all()
        ],
    }


async def dashboard_document(health: EngineHealth, recent: list[dict]) -> dict:
    """Everything the dashboard shows, polled every second."""
    return {
        "backend": {
            "device": health.state.device,
            "blas": blas_name() or "MLX's bundled BLAS",
            "cpu_kernels": health.state.kernels,
            "distributed": health.group,
        },
        "engine": {
            "ready": not not_ready(health),
            "problems": not_ready(health),
            "restarts": health.restarts,
            "last_failure": health.last_failure,
            "running": health.state.decoding,
            "queued": health.queued,
            "tokens_per_second": round(health.tokens_per_second, 1),
            "prefix_cache_disk": prefix_disk_document(health.state.prefix_disk),
        },
        "pool": await pool_document(health),
        "recent": recent,
        "series_interval_seconds": history.interval,  # how often /dashboard/series changes
    }


def dashboard_series() -> dict:
    """The dashboard's charts: this instance's samples of the last hour (observability's
    series.py); looking starts the sampler if no request has yet."""
    sampler.start()
    return history.document()
