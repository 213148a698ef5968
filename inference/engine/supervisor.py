"""Keeps one working engine per process: restarts it when its thread dies or wedges."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from operator import methodcaller

from inference.engine.admission import Admission
from inference.engine.config import EngineConfig
from inference.engine.state import EngineHealth
from inference.engine.types import BATCH, INTERACTIVE, EngineError, ErrorKind
from inference.engine.worker import RESTARTING, Engine

log = logging.getLogger(__name__)


class Supervisor:
    def __init__(
        self,
        config: EngineConfig,
        stall_timeout: float,
        check_every: float = 0.25,
        on_restart: Callable[[str], None] = lambda reason: None,
        group_timeout: float = 20.0,
    ) -> None:
        self._config = config
        self._stall_timeout = stall_timeout
        # A group's leader waiting this long on one turn (its heartbeat comes every second
        # while idle) has lost a follower.
        self._group_timeout = group_timeout
        self.group_lost: str | None = None
        self._check_every = check_every
        self._on_restart = on_restart
        self.engine = Engine(config)
        # Outlives engines: requests admitted before a restart still count until they end.
        self.admission = Admission(config.max_queued, config.max_queued_batch)
        self.restarts = 0
        self._evictions_before = 0  # by engines since replaced
        self.restarting = False
        self.last_failure: str | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="engine-supervisor", daemon=True)
        self._thread.start()

    def health(self) -> EngineHealth:
        engine = self.engine
        state = engine.live_state()
        batch_queued = self.admission.queued(state.decoding_batch, BATCH)
        return EngineHealth(
            state=state,
            alive=engine.alive,
            restarting=self.restarting,
            restarts=self.restarts,
            last_failure=self.last_failure,
            queued=self.admission.queued(state.decoding_of(INTERACTIVE)) + batch_queued,
            queued_batch=batch_queued,
            evictions=self._evictions_before + state.evictions,
            group=engine.link.describe(),
            group_lost=self.group_lost,
        )

    @property
    def ready(self) -> bool:
        return not self.restarting and self.engine.alive  # a lost group's engine is abandoned

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)
        self.engine.stop()

    def _watch(self) -> None:
        while not self._stopped.wait(self._check_every):
            grouped = self.engine.link.distributed
            timeout = self._group_timeout if grouped else self._stall_timeout
            problem = self.engine.problem(timeout)
            if problem is None or self._stopped.is_set():
                continue
            if grouped:
                self.lose_group(problem)
                return
            try:
                self.restart(problem)
            except Exception:  # keep watching: the next check tries again
                log.exception("restarting the engine failed")

    def lose_group(self, reason: str) -> None:
        """A group's engine cannot be restarted alone (its followers are gone or out of step):
        everything waiting ends with 503 engine_unavailable, and so does all that comes."""
        self.group_lost = self.last_failure = reason
        error = EngineError(
            ErrorKind.ENGINE_UNAVAILABLE,
            f"The distributed group serving the models is down ({reason}); "
            "the group must be restarted.",
        )
        self.engine.abandon(error)
        failed = self.engine.fail_inflight(error)
        log.critical("%s: the distributed group is lost, %d request(s) ended", reason, failed)

    def restart(self, reason: str) -> None:
        """Fails what the old engine held, starts a new one and reloads the pinned models."""
        started = time.monotonic()
        self.restarting = True
        self.last_failure = reason
        old = self.engine
        old.abandon()
        failed = old.fail_inflight(RESTARTING)
        pinned = old.pinned_specs()
        self._evictions_before += old.pool.evictions
        log.error("%s: ended %d request(s), restarting the engine", reason, failed)
        self.engine = Engine(self._config)
        for spec in pinned:
            try:
                self.engine.call(methodcaller("warm", spec)).result()
            except Exception:
                log.exception("reloading pinned model %s failed", spec.model_id)
        self.restarts += 1
        self.restarting = False
        self._on_restart(reason)
        log.warning(
            "engine restarted in %.1f s (%d pinned model(s) reloaded)",
            time.monotonic() - started,
            len(pinned),
        )
