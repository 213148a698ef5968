"""The engine thread: admits jobs, steps every model's batch, routes tokens to their requests."""

from __future__ import annotations

import itertools
import logging
import queue
import secrets
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from functools import partial
from typing import Any

import mlx.core as mx

from inference.engine import compute_format, cpu, fastmath, prefix_disk
from inference.engine.batching import ModelRunner
from inference.engine.config import EngineConfig
from inference.engine.embedding.runner import EmbeddingRunner
from inference.engine.inbox import Command
from inference.engine.loading import Loads
from inference.engine.lockstep import Turn, current_link
from inference.engine.overflow import too_many_prompt_tokens
from inference.engine.pool import LoadedModel, ModelPool
from inference.engine.rerank.runner import RerankRunner
from inference.engine.sequence import Sequence, vision_model
from inference.engine.state import EngineState, ModelState
from inference.engine.types import (
    EmbeddingJob,
    EngineError,
    ErrorKind,
    Event,
    Failed,
    GenerationJob,
    ImagePrompt,
    ModelSpec,
)

log = logging.getLogger(__name__)
_STOP = object()


class InjectedFault(Exception):
    """Raised outside every guard on purpose (POST /control/engine/fault): a crash drill."""


RESTARTING = EngineError(
    ErrorKind.ENGINE_RESTARTED, "The inference engine failed and is restarting; retry shortly."
)
Job = GenerationJob | EmbeddingJob
# Which runner steps a loaded model, by what it is for (chat models: ModelRunner).
RUNNERS: dict[str, type[EmbeddingRunner]] = {"embedding": EmbeddingRunner, "rerank": RerankRunner}


class Engine:
    """Owns the pool and every MLX call. Other threads only call submit(), call(), stop(),
    abandon() and fail_inflight(), and read `state` and the supervisor's counters."""

    def __init__(self, config: EngineConfig, link: Any = None) -> None:
        # Solo, or this process's place in a distributed group (engine/lockstep.py).
        self.link = link or current_link()
        if self.link.distributed:
            # Ranks must find the same prefixes, and what a rank's writer thread has written
            # by a given turn is a matter of timing: a group keeps prefixes in memory only.
            config = replace(config, prefix_cache_disk_bytes=0)
        self.config = config
        self._disk = prefix_disk.shared(config)
        cpu.configure(config.cpu_kernels, config.cpu_kernel_threads)
        compute_format.keep_verdicts(config.compute_format_verdicts)
        self.pool = ModelPool(
            config.pool_budget_bytes,
            on_unload=self._drop_runner,
            group=self.link.group if self.link.distributed else None,
        )
        self._runners: dict[str, ModelRunner | EmbeddingRunner] = {}
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        # Models being read on the loader thread (a wake-up call when one is read).
        self._loads = Loads(wake=lambda: self._inbox.put(None))
        # Every job not yet collected by its client, so that a supervisor can end them all
        # if this thread dies or wedges.
        self._jobs: weakref.WeakSet[GenerationJob] = weakref.WeakSet()
        self._jobs_lock = threading.Lock()
        # Jobs taken from the inbox, by the id every rank knows them by.
        self._taken: weakref.WeakValueDictionary[int, Job] = weakref.WeakValueDictionary()
        self._ids = itertools.count(1)
        self._abandoned = False
        self._refusal = RESTARTING  # what a job submitted after abandon() gets
        self._crash_requested = False
        self.failure: str | None = None  # why the thread stopped, once it has
        # Read by the supervisor: when the loop last turned, whether it sleeps for lack of
        # work, and whether it is loading weights (which may legitimately take minutes).
        self.heartbeat = time.monotonic()
        self.idle = True
        self.loading = False
        self._device = str(mx.default_device())
        self._kernels = ""  # decided on the engine thread as it starts
        self.state = EngineState(self._device, config.pool_budget_bytes)
        self._thread = threading.Thread(target=self._run, name="mlx-engine", daemon=True)
        self._thread.start()

    def submit(self, *jobs: GenerationJob | EmbeddingJob) -> None:
        """One request's jobs: started together, so its limits see all of them."""
        with self._jobs_lock:
            if self._abandoned:
                for job in jobs:
                    job.sink(Failed(self._refusal))
                return
            self._jobs.update(jobs)
        self._inbox.put(list(jobs))

    def call(self, run: Callable[[Engine], Any]) -> Future:
        """Runs `run(engine)` on the engine thread between steps. In a group, a `run` that
        changes the engine (loads, unloads) must pickle (operator.methodcaller), so that
        every rank runs it; any other runs on the leader only."""
        command = Command(run)
        if self._abandoned:
            command.future.set_exception(self._refusal)
        else:
            self._inbox.put(command)
        return command.future

    def stop(self) -> None:
        self._inbox.put(_STOP)
        self._thread.join(timeout=10)

    def join(self) -> None:
        """Waits for the engine thread to end (a group's follower: until its leader stops)."""
        self._thread.join()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._abandoned

    def problem(self, stall_timeout: float) -> str | None:
        """Why this engine cannot serve any more, or None while it is healthy."""
        if not self._thread.is_alive():
            return self.failure or "the engine thread died"
        stalled = time.monotonic() - self.heartbeat
        if not self.idle and not self.loading and stalled > stall_timeout:
            return f"the engine made no progress for {stalled:.0f} s"
        return None

    def abandon(self, refusal: EngineError = RESTARTING) -> None:
        """Stops taking work; a wedged thread that wakes up exits without touching its jobs."""
        with self._jobs_lock:
            self._abandoned = True
            self._refusal = refusal
        self._inbox.put(_STOP)

    def fail_inflight(self, error: EngineError) -> int:
        """Ends every job still waiting for events with `error`; returns how many."""
        with self._jobs_lock:
            jobs = [job for job in self._jobs if not job.cancelled.is_set()]
        for job in jobs:
            self._emit(job, Failed(error))
        return len(jobs)

    def request_crash(self) -> None:
        self._crash_requested = True
        self._inbox.put(None)  # wakes an idle loop

    def _run(self) -> None:
        try:
            fastmath.warm_up()  # before the first request waits for it
            self._kernels = cpu.kernel_status().describe()
            self.link.start()
            while not self._abandoned:
                self.heartbeat = time.monotonic()
                self._publish()
                busy = self._tell_disk()
                # Sleep on the inbox only when there is nothing to generate.
                turn = self.link.share(self._decide(block=not busy))
                self.heartbeat = time.monotonic()
                if turn.stop:
                    break
                self._apply(turn)
                self._adopt_loads()
                # Again before stepping: a request that arrived while idle (an agent's next
                # turn, read in one step) computes while the writer is told to wait.
                self._tell_disk()
                if self._crash_requested:
                    raise InjectedFault("engine crash requested through /control/engine/fault")
                for runner in list(self._runners.values()):
                    self._step(runner)
        except BaseException as exc:  # the supervisor sees the thread gone and replaces it
            self.failure = f"the engine thread died: {exc}"
            log.exception("the engine thread stopped on an error")
        finally:
            self._close()

    def _tell_disk(self) -> bool:
        """Whether this engine has sequences to compute, told to the disk tier (its writes
        wait while an engine computes)."""
        busy = any(r.busy for r in self._runners.values())
        if self._disk is not None:
            self._disk.busy(id(self), busy)
        return busy

    def live_state(self) -> EngineState:
        """Any thread: the published state, with the disk tier's counts read now (its writer
        writes while this engine sleeps on an empty inbox, publishing nothing)."""
        state = self.state
        return state if self._disk is None else replace(state, prefix_disk=self._disk.state())

    def _close(self) -> None:
        self._loads.close()
        # On this thread: MLX generators must be closed where they ran.
        for runner in list(self._runners.values()):
            try:
                runner.close()
            except Exception:
                log.exception("closing %s failed", runner.loaded.spec.model_id)
        # MLX's streams belong to the thread that used them; left for interpreter teardown,
        # they abort the process at exit ("terminate called without an active exception").
        # Older MLX has no clear_streams.
        clear_streams = getattr(mx, "clear_streams", None)
        if clear_streams is not None:
            clear_streams()
        if self._disk is not None:  # prompts read just before a stop are worth keeping
            self._disk.busy(id(self), False)
            self._disk.flush(timeout=10)

    def _decide(self, block: bool) -> Turn:
        """This turn's work, decided here (alone, or as a group's leader): what the inbox
        holds, which jobs were cancelled, which models idled out, how prompts are paced.
        A follower's turn comes from its leader instead (link.share ignores this one)."""
        if self.link.rank:
            return Turn()
        items, stop = self._take(block)
        return Turn(
            items=items,
            cancelled=[i for i, job in list(self._taken.items()) if self._cancelled(job)],
            evict=self.pool.idle_models(self.config.idle_ttl),
            pacing=self._pacing() if self.link.distributed else {},
            stop=stop,
        )

    def _pacing(self) -> dict[str, tuple[float, float]]:
        """What followers need to budget prompt reading as this rank does (alone: nothing)."""
        return {m: r.pacing for m, r in self._runners.items() if isinstance(r, ModelRunner)}

    @staticmethod
    def _cancelled(job: Job) -> bool:
        return job.cancelled.is_set() and not job.dropped

    def _take(self, block: bool) -> tuple[list, bool]:
        """Inbox items (job lists, commands) until it is empty; True once told to stop."""
        items: list = []
        while True:
            self.idle = block
            try:
                item = self._inbox.get(block=block, timeout=self._idle_wait() if block else None)
            except queue.Empty:
                return items, False
            finally:
                self.idle = False
                self.heartbeat = time.monotonic()
            if item is _STOP or self._abandoned:
                return items, True
            if item is None:  # a wake-up call
                return items, False
            if isinstance(item, list):
                item = self._number(item)
            if item:
                items.append(item)
            block = False

    def _number(self, jobs: list[Job]) -> list[Job]:
        """Ids, and a seed for every sampler without one, so that every rank samples alike;
        a request that cannot travel to a group's followers is refused here."""
        if self.link.distributed and not self.link.portable(jobs):
            error = EngineError(
                ErrorKind.INVALID_REQUEST, "this request cannot be shared with the group"
            )
            for job in jobs:
                self._emit(job, Failed(error))
            return []
        for job in jobs:
            job.id = next(self._ids)
            if isinstance(job, GenerationJob) and job.params.seed is None:
                job.params = replace(job.params, seed=secrets.randbits(63))
        return jobs

    def _idle_wait(self) -> float | None:
        """How long an idle engine may sleep: until an idle model is due for unloading, or
        a group's leader is due to show its followers it is alive."""
        waits = [self.link.heartbeat]
        deadline = self.pool.next_idle_deadline(self.config.idle_ttl)
        if deadline is not None:
            waits.append(max(0.0, deadline - time.monotonic()) + 0.05)
        waits = [w for w in waits if w is not None]
        return min(waits) if waits else None

    def _apply(self, turn: Turn) -> None:
        """The same on every rank: jobs known by id, cancellations, evictions, pacing, then
        the inbox's items in order."""
        for item in turn.items:
            if isinstance(item, list):
                self._taken.update((job.id, job) for job in item)
        for job_id in turn.cancelled:
            job = self._taken.get(job_id)
            if job is not None:
                job.dropped = True
        for model_id in turn.evict:
            if self.pool.unload(model_id):
                self.pool.evictions += 1
        for model_id, pacing in turn.pacing.items():
            runner = self._runners.get(model_id)
            if isinstance(runner, ModelRunner):
                runner.pacing = pacing
        for item in turn.items:
            if isinstance(item, Command):
                self._execute(item)
            else:
                self._start(item)

    def _execute(self, command: Command) -> None:
        if not command.future.set_running_or_notify_cancel():
            return
        try:
            result = command.run(self)
        except BaseException as exc:  # delivered to the caller, never raised here
            self._publish()
            command.future.set_exception(exc)
        else:
            self._publish()  # a caller that reads the state next sees what it did
            if isinstance(result, Future):  # answered later (a model read on the loader)
                result.add_done_callback(partial(_pass_on, command.future))
            else:
                command.future.set_result(result)

    # Commands (run on the engine thread through call()).

    def warm(self, spec: ModelSpec) -> dict | Future:
        """The model loaded; read on the loader thread (the answer comes when it is read)
        unless it is loaded already or the engine is one rank of a group."""
        if (loaded := self.pool.current(spec)) is not None:
            return _warmed(loaded, was_loaded=True)
        if self.link.distributed:
            return _warmed(self._load(spec), was_loaded=False)
        future: Future = Future()
        self._loads.wait_for(self.pool, spec, future)
        return future

    def _adopt_loads(self) -> None:
        """Models read since the last turn join the pool; what waited for them starts."""
        for outcome, waiting in self._loads.finished(self.pool):
            self._publish()
            for waiter in waiting:
                if isinstance(waiter, Future):
                    if isinstance(outcome, EngineError):
                        waiter.set_exception(outcome)
                    else:
                        waiter.set_result(_warmed(outcome, was_loaded=False))
                elif isinstance(outcome, EngineError):
                    for job in waiter:
                        self._emit(job, Failed(outcome))
                else:
                    self._start(waiter)

    def _model_ready(self, jobs: list[Job]) -> bool:
        """Whether the jobs' model is loaded; if not, they wait for it (read on the loader
        thread while the other models go on) and start once it is. A group reads in lockstep,
        here and now (engine/pool.py)."""
        spec = jobs[0].spec
        if self.link.distributed or self.pool.current(spec) is not None:
            return True
        try:
            self._loads.wait_for(self.pool, spec, jobs)
        except EngineError as exc:
            for job in jobs:
                self._emit(job, Failed(exc))
        return False

    def count_image_prompt(self, spec: ModelSpec, prompt: ImagePrompt) -> int:
        """A prompt with images' length in tokens, as the model's processor expands it (no
        vision tower run)."""
        from inference.engine.vision.prompt import processed

        return len(processed(prompt, vision_model(self._load(spec)))[0])

    def keep_alive(self, model_id: str, seconds: float | None) -> bool:
        """How long a loaded model stays once idle, as a request said (Ollama's keep_alive):
        seconds, 0 to unload it when its sequences end, negative for never; None: the
        engine's idle TTL again. False when the model is not loaded."""
        return self.pool.keep_alive(model_id, seconds)

    def unload(self, model_id: str) -> bool:
        runner = self._runners.get(model_id)
        if runner is not None:
            error = Failed(
                EngineError(ErrorKind.MODEL_UNAVAILABLE, f"model '{model_id}' was unloaded")
            )
            for sequence in runner.sequences:
                self._emit(sequence.job, error)
        return self.pool.unload(model_id)

    def _publish(self) -> None:
        """Swaps in a fresh snapshot; readers on other threads never wait for this one."""
        self.state = EngineState(
            device=self._device,
            budget_bytes=self.pool.budget,
            kernels=self._kernels,
            models=tuple(self._model_state(m) for m in self.pool.loaded()),
            evictions=self.pool.evictions,
            prefix_disk=self._disk.state() if self._disk is not None else None,
        )

    def _model_state(self, loaded: LoadedModel) -> ModelState:
        runner = self._runners.get(loaded.spec.model_id)
        sequences = runner.sequences if runner else []
        queued = runner.waiting if runner else 0
        prefixes = runner.prefixes if isinstance(runner, ModelRunner) else None
        drafts = runner.speculation if isinstance(runner, ModelRunner) else None
        return ModelState(
            id=loaded.spec.model_id,
            bytes=loaded.nbytes,
            compute_format=loaded.compute_format,
            kernels=loaded.kernels,
            format_reason=loaded.format_reason,
            pinned=loaded.spec.pinned,
            load_seconds=round(loaded.load_seconds, 3),
            last_used=loaded.last_used,
            keep_alive=loaded.keep_alive,
            active_sequences=len(sequences) - queued,
            queued_sequences=queued,
            tokens_per_second=round(runner.tokens_per_second(), 2) if runner else 0.0,
            prefix_cache_bytes=runner.prefix_cache_bytes if runner else 0,
            prefix_disk_hits=prefixes.stats.disk_hits if prefixes else 0,
            prefix_disk_tokens=prefixes.stats.disk_tokens if prefixes else 0,
            draft_tokens=drafts.drafted if drafts else 0,
            accepted_draft_tokens=drafts.accepted if drafts else 0,
            verify_steps=drafts.steps if drafts else 0,
            replayed_steps=drafts.replays if drafts else 0,
            drafters={k: (v[0], v[1]) for k, v in drafts.drafters.items()} if drafts else {},
            mtp=loaded.mtp_reason,
            mtp_heads=loaded.mtp is not None,
            kv_cache=loaded.kv_cache,
            activations=loaded.activations,
            q6k=loaded.q6k,
            context_length=loaded.context_length,
        )

    def _start(self, jobs: list[GenerationJob] | list[EmbeddingJob]) -> None:
        if not self._model_ready(jobs):
            return
        if len(jobs) == 1 and isinstance(jobs[0], EmbeddingJob):
            self._start_embedding(jobs[0])
            return
        started = [(job, s) for job in jobs if (s := self._sequence(job)) is not None]
        limit = self.config.max_request_prompt_tokens
        total = sum(len(s.prompt) for _, s in started)
        if limit and total > limit:
            error = too_many_prompt_tokens(total, limit)
            for job, _ in started:
                self._emit(job, Failed(error))
            return
        for job, sequence in started:
            self._runner(sequence.loaded).add(sequence)
            self._emit(job, sequence.started())

    def _start_embedding(self, job: EmbeddingJob) -> None:
        """Tokenized and checked here; answered by the model's EmbeddingRunner when done."""
        if job.dropped:
            return
        try:
            self._runner(self._load(job.spec)).add(job)
        except EngineError as exc:
            self._emit(job, Failed(exc))
        except Exception:  # a bad request must never take the engine down
            log.exception("could not start embedding for %s", job.spec.model_id)
            self._emit(job, Failed(EngineError(ErrorKind.INTERNAL, "embedding failed")))

    def _sequence(self, job: GenerationJob) -> Sequence | None:
        """The job's sequence, ready to add; None (and the job failed) if it cannot run."""
        if job.dropped:
            return None
        try:
            return Sequence(job, self._load(job.spec))
        except EngineError as exc:
            self._emit(job, Failed(exc))
        except Exception:  # a bad request must never take the engine down
            log.exception("could not start a sequence for %s", job.spec.model_id)
            self._emit(job, Failed(EngineError(ErrorKind.INTERNAL, "generation failed")))
        return None

    def _load(self, spec: ModelSpec) -> LoadedModel:
        self.loading = True
        try:
            return self.pool.get(spec)
        finally:
            self.loading = False
            self.heartbeat = time.monotonic()

    def pinned_specs(self) -> list[ModelSpec]:
        return [m.spec for m in self.pool.loaded() if m.spec.pinned]

    def _runner(self, loaded: LoadedModel) -> ModelRunner | EmbeddingRunner:
        runner = self._runners.get(loaded.spec.model_id)
        if runner is None or runner.loaded is not loaded:
            kind = RUNNERS.get(loaded.spec.purpose, ModelRunner)
            runner = self._runners[loaded.spec.model_id] = kind(loaded, self.config)
        return runner

    def _drop_runner(self, model_id: str) -> None:
        runner = self._runners.pop(model_id, None)
        if runner is not None:
            runner.close()

    def _step(self, runner: ModelRunner) -> None:
        cancelled = [s for s in runner.sequences if s.job.dropped]
        if cancelled:
            runner.cancel(cancelled)
        if not runner.busy:
            return
        try:
            results = runner.step()
        except Exception:
            if self.link.distributed:  # a lost peer, or ranks out of step: nothing to retry
                raise
            log.exception("a decode step failed for %s", runner.loaded.spec.model_id)
            self._fail_all(runner)
            self._publish()
            return
        self._publish()  # before the events: a client that saw Done reads it finished
        for sequence, events in results:
            for event in events:
                self._emit(sequence.job, event)

    def _fail_all(self, runner: ModelRunner) -> None:
        """A step broke the batch: its requests end with an error, the model gets a fresh batch."""
        error = Failed(EngineError(ErrorKind.INTERNAL, "generation failed"))
        for sequence in runner.sequences:
            self._emit(sequence.job, error)
        self._drop_runner(runner.loaded.spec.model_id)

    def _emit(self, job: GenerationJob, event: Event) -> None:
        if self._abandoned and threading.current_thread() is self._thread:
            return  # its jobs were failed when it was abandoned
        try:
            job.sink(event)
        except Exception:
            # The listener is gone (its event loop closed): stop working for it.
            job.cancelled.set()


def _warmed(loaded: LoadedModel, was_loaded: bool) -> dict:
    return {
        "id": loaded.spec.model_id,
        "bytes": loaded.nbytes,
        "load_seconds": 0.0 if was_loaded else round(loaded.load_seconds, 3),
        "already_loaded": was_loaded,
    }


def _pass_on(target: Future, source: Future) -> None:
    error = source.exception()
    if error is not None:
        target.set_exception(error)
    else:
        target.set_result(source.result())
