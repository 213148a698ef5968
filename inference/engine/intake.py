"""Job intake: a request's jobs, taken from a turn, become sequences in their model's runner
(or wait for the model to be read), or fail with why they cannot run."""

from __future__ import annotations

import logging

from inference.engine.overflow import too_many_prompt_tokens
from inference.engine.parts import EngineParts, Job
from inference.engine.pool_commands import PoolCommands
from inference.engine.sequence import Sequence
from inference.engine.types import EmbeddingJob, EngineError, ErrorKind, Failed, GenerationJob

log = logging.getLogger(__name__)


class JobIntake:
    """Engine thread only; a bad request fails its own jobs and never takes the engine down."""

    def __init__(self, parts: EngineParts, commands: PoolCommands) -> None:
        self._parts = parts
        self._commands = commands

    def start(self, jobs: list[GenerationJob] | list[EmbeddingJob]) -> None:
        """One request's jobs: started together, so that its prompt-token limit sees all."""
        if not self._model_ready(jobs):
            return
        if len(jobs) == 1 and isinstance(jobs[0], EmbeddingJob):
            self._start_embedding(jobs[0])
            return
        emit = self._parts.emit
        started = [(job, s) for job in jobs if (s := self._sequence(job)) is not None]
        limit = self._parts.config.max_request_prompt_tokens
        total = sum(len(s.prompt) for _, s in started)
        if limit and total > limit:
            error = too_many_prompt_tokens(total, limit)
            for job, _ in started:
                emit(job, Failed(error))
            return
        for job, sequence in started:
            self._commands.runner(sequence.loaded).add(sequence)
            emit(job, sequence.started())

    def _model_ready(self, jobs: list[Job]) -> bool:
        """Whether the jobs' model is loaded; if not, they wait for it (read on the loader
        thread while the other models go on) and start once it is. A group reads in lockstep,
        here and now (engine/pool.py)."""
        parts = self._parts
        spec = jobs[0].spec
        if parts.link.distributed or parts.pool.current(spec) is not None:
            return True
        try:
            parts.loads.wait_for(parts.pool, spec, jobs)
        except EngineError as exc:
            for job in jobs:
                parts.emit(job, Failed(exc))
        return False

    def _start_embedding(self, job: EmbeddingJob) -> None:
        """Tokenized and checked here; answered by the model's EmbeddingRunner when done."""
        if job.dropped:
            return
        try:
            self._commands.runner(self._commands.load(job.spec)).add(job)
        except EngineError as exc:
            self._parts.emit(job, Failed(exc))
        except Exception:  # a bad request must never take the engine down
            log.exception("could not start embedding for %s", job.spec.model_id)
            self._parts.emit(job, Failed(EngineError(ErrorKind.INTERNAL, "embedding failed")))

    def _sequence(self, job: GenerationJob) -> Sequence | None:
        """The job's sequence, ready to add; None (and the job failed) if it cannot run."""
        if job.dropped:
            return None
        try:
            return Sequence(job, self._commands.load(job.spec))
        except EngineError as exc:
            self._parts.emit(job, Failed(exc))
        except Exception:  # a bad request must never take the engine down
            log.exception("could not start a sequence for %s", job.spec.model_id)
            self._parts.emit(job, Failed(EngineError(ErrorKind.INTERNAL, "generation failed")))
        return None
