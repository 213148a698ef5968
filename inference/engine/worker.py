"""The engine thread: admits jobs, steps every running sequence one token at a time."""

from __future__ import annotations

import logging
import queue
import threading

from inference.engine.pool import ModelPool
from inference.engine.sequence import Sequence
from inference.engine.types import Done, EngineError, ErrorKind, Event, Failed, GenerationJob

log = logging.getLogger(__name__)
_STOP = object()


class Engine:
    """Owns the pool and every MLX call. Other threads only call submit() and stop()."""

    def __init__(self, pool: ModelPool) -> None:
        self.pool = pool
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._running: list[Sequence] = []
        self._thread = threading.Thread(target=self._run, name="mlx-engine", daemon=True)
        self._thread.start()

    def submit(self, job: GenerationJob) -> None:
        self._inbox.put(job)

    def stop(self) -> None:
        self._inbox.put(_STOP)
        self._thread.join(timeout=10)

    @property
    def running(self) -> int:
        return len(self._running)

    def _run(self) -> None:
        while True:
            # Sleep on the inbox only when there is nothing to generate.
            if not self._admit(block=not self._running):
                return
            for sequence in list(self._running):
                self._step(sequence)

    def _admit(self, block: bool) -> bool:
        while True:
            try:
                item = self._inbox.get(block=block)
            except queue.Empty:
                return True
            if item is _STOP:
                for sequence in list(self._running):
                    self._retire(sequence)
                return False
            self._start(item)
            block = False

    def _start(self, job: GenerationJob) -> None:
        if job.cancelled.is_set():
            return
        try:
            loaded = self.pool.get(job.spec)
            sequence = Sequence(job, loaded)
        except EngineError as exc:
            self._emit(job, Failed(exc))
            return
        except Exception:  # a bad request must never take the engine down
            log.exception("could not start a sequence for %s", job.spec.model_id)
            self._emit(job, Failed(EngineError(ErrorKind.INTERNAL, "generation failed")))
            return
        loaded.active += 1
        self._running.append(sequence)
        self._emit(job, sequence.started)

    def _step(self, sequence: Sequence) -> None:
        job = sequence.job
        if job.cancelled.is_set():
            self._retire(sequence)
            return
        try:
            events = sequence.advance()
        except Exception:
            log.exception("generation failed for %s", job.spec.model_id)
            events = [Failed(EngineError(ErrorKind.INTERNAL, "generation failed"))]
        for event in events:
            self._emit(job, event)
        if events and isinstance(events[-1], Done | Failed):
            self._retire(sequence)

    def _retire(self, sequence: Sequence) -> None:
        self._running.remove(sequence)
        sequence.loaded.active -= 1
        try:
            sequence.close()
        except Exception:
            log.exception("closing a sequence failed")

    @staticmethod
    def _emit(job: GenerationJob, event: Event) -> None:
        try:
            job.sink(event)
        except Exception:
            # The listener is gone (its event loop closed): stop working for it.
            job.cancelled.set()
