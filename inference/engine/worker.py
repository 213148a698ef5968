"""The engine thread: admits jobs, steps every model's batch, routes tokens to their requests."""

from __future__ import annotations

import logging
import queue
import threading

from inference.engine.batching import ModelRunner
from inference.engine.config import EngineConfig
from inference.engine.pool import LoadedModel, ModelPool
from inference.engine.sequence import Sequence
from inference.engine.types import EngineError, ErrorKind, Event, Failed, GenerationJob

log = logging.getLogger(__name__)
_STOP = object()


class Engine:
    """Owns the pool and every MLX call. Other threads only call submit(), stop() and read
    the counters."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.pool = ModelPool(config.pool_budget_bytes, on_unload=self._drop_runner)
        self._runners: dict[str, ModelRunner] = {}
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="mlx-engine", daemon=True)
        self._thread.start()

    def submit(self, job: GenerationJob) -> None:
        self._inbox.put(job)

    def stop(self) -> None:
        self._inbox.put(_STOP)
        self._thread.join(timeout=10)

    @property
    def running(self) -> int:
        return sum(len(r.sequences) for r in list(self._runners.values()))

    def _run(self) -> None:
        while True:
            busy = any(r.sequences for r in self._runners.values())
            # Sleep on the inbox only when there is nothing to generate.
            if not self._admit(block=not busy):
                break
            for runner in list(self._runners.values()):
                self._step(runner)
        for runner in list(self._runners.values()):
            runner.close()

    def _admit(self, block: bool) -> bool:
        while True:
            try:
                item = self._inbox.get(block=block)
            except queue.Empty:
                return True
            if item is _STOP:
                return False
            self._start(item)
            block = False

    def _start(self, job: GenerationJob) -> None:
        if job.cancelled.is_set():
            return
        try:
            loaded = self.pool.get(job.spec)
            sequence = Sequence(job, loaded)
            self._runner(loaded).add(sequence)
        except EngineError as exc:
            self._emit(job, Failed(exc))
            return
        except Exception:  # a bad request must never take the engine down
            log.exception("could not start a sequence for %s", job.spec.model_id)
            self._emit(job, Failed(EngineError(ErrorKind.INTERNAL, "generation failed")))
            return
        self._emit(job, sequence.started())

    def _runner(self, loaded: LoadedModel) -> ModelRunner:
        runner = self._runners.get(loaded.spec.model_id)
        if runner is None or runner.loaded is not loaded:
            runner = self._runners[loaded.spec.model_id] = ModelRunner(loaded, self.config)
        return runner

    def _drop_runner(self, model_id: str) -> None:
        runner = self._runners.pop(model_id, None)
        if runner is not None:
            runner.close()

    def _step(self, runner: ModelRunner) -> None:
        for sequence in runner.sequences:
            if sequence.job.cancelled.is_set():
                runner.cancel(sequence)
        if not runner.sequences:
            return
        try:
            results = runner.step()
        except Exception:
            log.exception("a decode step failed for %s", runner.loaded.spec.model_id)
            self._fail_all(runner)
            return
        for sequence, events in results:
            for event in events:
                self._emit(sequence.job, event)

    def _fail_all(self, runner: ModelRunner) -> None:
        """A step broke the batch: its requests end with an error, the model gets a fresh batch."""
        error = Failed(EngineError(ErrorKind.INTERNAL, "generation failed"))
        for sequence in runner.sequences:
            self._emit(sequence.job, error)
        self._drop_runner(runner.loaded.spec.model_id)

    @staticmethod
    def _emit(job: GenerationJob, event: Event) -> None:
        try:
            job.sink(event)
        except Exception:
            # The listener is gone (its event loop closed): stop working for it.
            job.cancelled.set()
