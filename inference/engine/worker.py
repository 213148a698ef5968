"""The engine thread: admits jobs, steps every model's batch, routes tokens to their requests.

Engine holds the thread, its loop and the handle other threads use; the rest is in pieces it
owns, sharing one EngineParts (parts.py): its turns, decided and applied (turns.py), job
intake (intake.py), the pool's commands (pool_commands.py), health publishing (publishing.py).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

import mlx.core as mx

from inference.engine import compute_format, cpu, fastmath, prefix_disk
from inference.engine.batching import ModelRunner
from inference.engine.config import EngineConfig
from inference.engine.inbox import Command
from inference.engine.intake import JobIntake
from inference.engine.loading import Loads
from inference.engine.lockstep import current_link
from inference.engine.parts import EngineParts, Job, Pulse, Runners
from inference.engine.pool import ModelPool
from inference.engine.pool_commands import PoolCommands
from inference.engine.publishing import StatePublisher
from inference.engine.state import EngineState
from inference.engine.turns import STOP, Turns
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


class InjectedFault(Exception):
    """Raised outside every guard on purpose (POST /control/engine/fault): a crash drill."""


RESTARTING = EngineError(
    ErrorKind.ENGINE_RESTARTED, "The inference engine failed and is restarting; retry shortly."
)


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
        self._disk = prefix_disk.shared(config)
        cpu.configure(config.cpu_kernels, config.cpu_kernel_threads)
        compute_format.keep_verdicts(config.compute_format_verdicts)
        runners = Runners()
        self.pool = ModelPool(
            config.pool_budget_bytes,
            on_unload=runners.drop,
            group=self.link.group if self.link.distributed else None,
        )
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._parts = EngineParts(
            config=config,
            link=self.link,
            pool=self.pool,
            runners=runners,
            # Models being read on the loader thread (a wake-up call when one is read).
            loads=Loads(wake=lambda: self._inbox.put(None)),
            pulse=Pulse(),
            emit=self._emit,
        )
        self._health = StatePublisher(self._parts, str(mx.default_device()), self._disk)
        self._commands = PoolCommands(self._parts, publish=self._health.publish)
        self._intake = JobIntake(self._parts, self._commands)
        self._turns = Turns(self._parts, self._inbox, self._health.publish, lambda: self._abandoned)
        # Every job not yet collected by its client, so that a supervisor can end them all
        # if this thread dies or wedges.
        self._jobs: weakref.WeakSet[GenerationJob] = weakref.WeakSet()
        self._jobs_lock = threading.Lock()
        self._abandoned = False
        self._refusal = RESTARTING  # what a job submitted after abandon() gets
        self._crash_requested = False
        self.failure: str | None = None  # why the thread stopped, once it has
        self._thread = threading.Thread(target=self._run, name="mlx-engine", daemon=True)
        self._thread.start()

    # The pieces read the config through the parts at each use, so a config set here (tests
    # swap one in) reaches all of them.
    @property
    def config(self) -> EngineConfig:
        return self._parts.config

    @config.setter
    def config(self, config: EngineConfig) -> None:
        self._parts.config = config

    @property
    def state(self) -> EngineState:
        """The last published state (any thread; live_state() adds the disk tier's now)."""
        return self._health.state

    # The pulse problem() reads (parts.Pulse: the pieces that load or wait beat it too).
    @property
    def heartbeat(self) -> float:
        return self._parts.pulse.heartbeat

    @property
    def idle(self) -> bool:
        return self._parts.pulse.idle

    @property
    def loading(self) -> bool:
        return self._parts.pulse.loading

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
        self._inbox.put(STOP)
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
        pulse = self._parts.pulse
        stalled = time.monotonic() - pulse.heartbeat
        if not pulse.idle and not pulse.loading and stalled > stall_timeout:
            return f"the engine made no progress for {stalled:.0f} s"
        return None

    def abandon(self, refusal: EngineError = RESTARTING) -> None:
        """Stops taking work; a wedged thread that wakes up exits without touching its jobs."""
        with self._jobs_lock:
            self._abandoned = True
            self._refusal = refusal
        self._inbox.put(STOP)

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

    def live_state(self) -> EngineState:
        return self._health.live_state()

    # Commands (run on the engine thread through call(); by name, as methodcaller sends
    # them to a group's followers).

    def warm(self, spec: ModelSpec) -> dict | Future:
        return self._commands.warm(spec)

    def count_image_prompt(self, spec: ModelSpec, prompt: ImagePrompt) -> int:
        return self._commands.count_image_prompt(spec, prompt)

    def keep_alive(self, model_id: str, seconds: float | None) -> bool:
        return self._commands.keep_alive(model_id, seconds)

    def unload(self, model_id: str) -> bool:
        return self._commands.unload(model_id)

    def pinned_specs(self) -> list[ModelSpec]:
        return self._commands.pinned_specs()

    def _run(self) -> None:
        pulse = self._parts.pulse
        try:
            fastmath.warm_up()  # before the first request waits for it
            self._health.kernels = cpu.kernel_status().describe()
            self.link.start()
            while not self._abandoned:
                pulse.beat()
                self._health.publish()
                busy = self._tell_disk()
                # Sleep on the inbox only when there is nothing to generate.
                turn = self.link.share(self._turns.decide(block=not busy))
                pulse.beat()
                if turn.stop:
                    break
                self._turns.apply(turn, self, start=self._intake.start)
                self._commands.adopt_loads(self._intake.start)
                # Again before stepping: a request that arrived while idle (an agent's next
                # turn, read in one step) computes while the writer is told to wait.
                self._tell_disk()
                if self._crash_requested:
                    raise InjectedFault("engine crash requested through /control/engine/fault")
                for runner in list(self._parts.runners.values()):
                    self._step(runner)
        except BaseException as exc:  # the supervisor sees the thread gone and replaces it
            self.failure = f"the engine thread died: {exc}"
            log.exception("the engine thread stopped on an error")
        finally:
            self._close()

    def _tell_disk(self) -> bool:
        """Whether this engine has sequences to compute, told to the disk tier (its writes
        wait while an engine computes)."""
        busy = any(r.busy for r in self._parts.runners.values())
        if self._disk is not None:
            self._disk.busy(id(self), busy)
        return busy

    def _close(self) -> None:
        self._parts.loads.close()
        # On this thread: MLX generators must be closed where they ran.
        for runner in list(self._parts.runners.values()):
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
            self._health.publish()
            return
        self._health.publish()  # before the events: a client that saw Done reads it finished
        for sequence, events in results:
            for event in events:
                self._emit(sequence.job, event)

    def _fail_all(self, runner: ModelRunner) -> None:
        """A step broke the batch: its requests end with an error, the model gets a fresh batch."""
        error = Failed(EngineError(ErrorKind.INTERNAL, "generation failed"))
        for sequence in runner.sequences:
            self._emit(sequence.job, error)
        self._parts.runners.drop(runner.loaded.spec.model_id)

    def _emit(self, job: Job, event: Event) -> None:
        if self._abandoned and threading.current_thread() is self._thread:
            return  # its jobs were failed when it was abandoned
        try:
            job.sink(event)
        except Exception:
            # The listener is gone (its event loop closed): stop working for it.
            job.cancelled.set()
