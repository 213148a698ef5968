"""The admin's way to the running server's pool, without the catalog importing inference.

The catalog sits below inference (serving reads catalog rows), so its admin cannot import the
pool's code without an arrow running back up. Instead the catalog says here what it needs
(`PoolOps`), and the inference app fills the seam when Django starts (inference/apps.py, with
inference/pool_ops.py). An admin page asked for before that, or in a project without the
inference app, gets a PoolUnavailable that says so, never a quiet "not loaded"."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class LoadedModel(Protocol):
    """What the admin shows of a model the pool holds (the engine's ModelState has it)."""

    id: str
    bytes: int
    compute_format: str
    activations: str  # "" where no quantized layer rounds them
    q6k: str  # what a GGUF import's Q6_K layers became, "" where it has none
    kv_cache: str  # "" for a model that keeps none
    context_length: int


class LoadSettings(Protocol):
    """A catalog model's load settings as the pool compares them (the engine's ModelSpec):
    two equal settings load the same model, and `model_id` names it."""

    model_id: str


class PoolRefused(Exception):
    """The pool would not do it (an unknown or disabled model, a load that failed); `message`
    says why, in the words the API would use."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class PoolUnavailable(RuntimeError):
    """No pool was registered: the inference app has not started (or is not installed)."""


class PoolOps(Protocol):
    def loaded(self) -> Sequence[LoadedModel]:
        """The models loaded now, from the engine's last snapshot: never waits for the engine,
        never starts it (empty while it has not started)."""
        ...

    def warm(self, model_id: str) -> dict:
        """Loads it (waiting for the load); {"load_seconds", "already_loaded", ...}. Raises
        PoolRefused."""
        ...

    def unload(self, model_id: str) -> dict:
        """Unloads it; {"id", "unloaded": whether it was loaded}. Raises PoolRefused."""
        ...


_pool: PoolOps | None = None


def register(ops: PoolOps) -> None:
    """Called once by the inference app as Django starts; a later call replaces the pool (a
    test's own)."""
    global _pool
    _pool = ops


def pool() -> PoolOps:
    if _pool is None:
        raise PoolUnavailable(
            "The admin has no pool to ask: the inference app registers it when Django starts "
            "(inference/apps.py); is 'inference' in INSTALLED_APPS?"
        )
    return _pool


def loaded_model(model_id: str) -> LoadedModel | None:
    """The loaded model of this id, or None."""
    return next((m for m in pool().loaded() if m.id == model_id), None)
