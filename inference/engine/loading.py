"""Models read on a loader thread while the engine goes on stepping the others.

Reading weights and converting them to the compute format takes seconds to minutes; on the
engine thread, every running stream of every other model would stop meanwhile. The engine
thread makes room for the model (unloading is the pool's, engine thread only), hands the read
to a thread of its own, parks whatever waits for the model (a request's jobs, a warm
command's future), and adopts the weights between two steps once they are read. MLX (0.31.2
and later) gives each thread its own stream; the arrays come back evaluated, so the engine
thread only reads them. A distributed group loads in lockstep instead (engine/pool.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx

from inference.engine.arrays import materialize
from inference.engine.pool import LoadedModel, Loading, ModelPool
from inference.engine.types import EngineError, ModelSpec


def _read_on_own_thread(load: Loading, future: Future) -> None:
    """One read on a thread of its own, which leaves nothing of MLX behind: MLX's streams
    belong to the thread that used them, and one left for interpreter teardown aborts the
    process at exit (the engine thread clears its own the same way)."""
    if not future.set_running_or_notify_cancel():
        return
    try:
        read = load.read()
        # Nothing lazy crosses, private arrays included.
        materialize(read[0], load.draft, load.mtp and load.mtp.head)
        mx.synchronize()
    except BaseException as exc:  # delivered to the engine thread, which refuses the model
        future.set_exception(exc)
    else:
        future.set_result(read)
    finally:
        clear_streams = getattr(mx, "clear_streams", None)  # older MLX has none
        if clear_streams is not None:
            clear_streams()


@dataclass
class Pending:
    load: Loading
    future: Future
    waiting: list[Any] = field(default_factory=list)  # job lists and warm futures, in order


class Loads:
    def __init__(self, wake: Callable[[], None]) -> None:
        self._wake = wake  # called on the loader thread when a read ends: the engine looks
        self._pending: dict[str, Pending] = {}

    def __contains__(self, model_id: str) -> bool:
        return model_id in self._pending

    def wait_for(self, pool: ModelPool, spec: ModelSpec, waiter: Any) -> None:
        """Parks `waiter` until `spec`'s model is read, starting the read if none runs;
        raises the pool's refusal at once when there is no room for it."""
        pending = self._pending.get(spec.model_id)
        if pending is None or pending.load.spec != spec:
            try:
                load = pool.begin(spec)
            except Exception as exc:
                pool.finish(Loading(spec), exc)  # raises the refusal
            future: Future = Future()
            future.add_done_callback(lambda _: self._wake())
            name = f"mlx-loader-{spec.model_id}"
            threading.Thread(target=_read_on_own_thread, args=(load, future), name=name).start()
            pending = self._pending[spec.model_id] = Pending(load, future)
        pending.waiting.append(waiter)

    def finished(self, pool: ModelPool) -> list[tuple[LoadedModel | EngineError, list[Any]]]:
        """The reads that ended, adopted into the pool (or their refusals), with their waiters."""
        done = [p for p in self._pending.values() if p.future.done()]
        results: list[tuple[LoadedModel | EngineError, list[Any]]] = []
        for pending in done:
            del self._pending[pending.load.spec.model_id]
            error = pending.future.exception()
            try:
                outcome: LoadedModel | EngineError = pool.finish(
                    pending.load, error or pending.future.result()
                )
            except EngineError as refusal:
                outcome = refusal
            results.append((outcome, pending.waiting))
        return results

    def close(self) -> None:
        """Reads still running finish on their threads; nobody adopts them."""
        self._pending.clear()
