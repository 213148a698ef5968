"""The batch runner: one thread with its own asyncio loop inside the server process (started
by `manage.py serve`), running every active batch a few lines at a time through the same
serving code as the HTTP endpoints (lines.py).

The engine handle's queues belong to the loop that starts a job (engine/handle.py takes the
running loop), so jobs started here deliver their events here. Each line's outcome is stored as
it ends (finish.record); on start, batches still active resume with the lines not yet done.
Cancelling stops starting lines and cancels those running (their contexts close, which
releases their engine jobs); the window passing ends the batch `expired`. On shutdown the
runner stops starting lines and lets those running finish (drain), so a restart runs none of
them again."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import secrets
import socket
import threading
import time
from datetime import timedelta

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone

from apikeys.auth import Caller
from batches.models import Batch, BatchLine
from batches.retention import sweep_expired
from inference.batches import finish
from inference.batches.lines import Interrupted, Retry, run_line
from inference.batches.scope import caller_of
from inference.serving.drain import drain

log = logging.getLogger(__name__)
Status = Batch.Status
SCAN_SECONDS = 2.0  # how often active batches are looked for without a wake-up
CHECK_SECONDS = 0.5  # how often a running batch reads whether it was cancelled
RETRY_SECONDS = 5.0  # the longest wait for a full engine queue before trying again
LEASE_SECONDS = 15.0  # a batch's lease, renewed at every check while it runs
INSTANCE = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class BatchRunner(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="batch-runner", daemon=True)
        self.stopping = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._ready = threading.Event()
        # Per key, its concurrency limit over all its batches together.
        self._key_slots: dict[int | None, asyncio.Semaphore] = {}

    def slots(self, caller: Caller) -> asyncio.Semaphore | None:
        if caller.max_concurrent is None:
            return None
        return self._key_slots.setdefault(caller.key_id, asyncio.Semaphore(caller.max_concurrent))

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self.loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        self._ready.set()
        tasks: dict[str, asyncio.Task] = {}
        next_sweep = 0.0
        while not (self.stopping and not tasks):
            if settings.FILES_SWEEP_INTERVAL and time.monotonic() >= next_sweep:
                await sync_to_async(sweep_expired)()
                next_sweep = time.monotonic() + settings.FILES_SWEEP_INTERVAL
            tasks = {key: task for key, task in tasks.items() if not task.done()}
            if not self.quitting:
                for batch_id in await active_batches():
                    if batch_id not in tasks:
                        tasks[batch_id] = asyncio.create_task(self._drive(batch_id))
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), SCAN_SECONDS)

    @property
    def quitting(self) -> bool:
        return self.stopping or drain.draining

    def wake(self) -> None:
        """A batch was made or cancelled: look now rather than at the next scan."""
        if self.loop is not None and self._wake is not None:
            self.loop.call_soon_threadsafe(self._wake.set)

    def stop(self, timeout: float) -> None:
        """No line starts from now; those running get `timeout` seconds to finish."""
        self.stopping = True
        self.wake()
        self.join(timeout)

    async def _drive(self, batch_id: str) -> None:
        try:
            await drive(self, batch_id)
        except Exception:
            log.exception("batch %s stopped on an error; it resumes at the next scan", batch_id)
            await asyncio.sleep(SCAN_SECONDS)


async def active_batches() -> list[str]:
    rows = Batch.objects.filter(status__in=Batch.ACTIVE).order_by("created_at")
    return [pk async for pk in rows.values_list("pk", flat=True)]


async def claim(batch_id: str) -> bool:
    """This process's lease on the batch, taken or renewed; False while another holds it."""
    now = timezone.now()
    free = Q(runner="") | Q(runner=INSTANCE) | Q(leased_until__lt=now)
    until = now + timedelta(seconds=LEASE_SECONDS)
    return bool(
        await Batch.objects.filter(free, pk=batch_id).aupdate(runner=INSTANCE, leased_until=until)
    )


async def drive(runner: BatchRunner, batch_id: str) -> None:
    if not await claim(batch_id):
        return  # another instance on this database runs it
    try:
        await run_batch(runner, batch_id)
    finally:  # given back at once, so that a restarted server resumes it without waiting
        await Batch.objects.filter(pk=batch_id, runner=INSTANCE).aupdate(runner="")


async def run_batch(runner: BatchRunner, batch_id: str) -> None:
    batch = await Batch.objects.select_related("api_key").aget(pk=batch_id)
    if batch.status == Status.VALIDATING and not await sync_to_async(finish.validate)(batch):
        return
    if batch.status == Status.FINALIZING:
        await sync_to_async(finish.end)(batch_id, Status.COMPLETED)
        return
    caller = await sync_to_async(caller_of)(batch.api_key)
    width = min(settings.BATCH_CONCURRENCY, caller.max_concurrent or math.inf)
    pending = BatchLine.objects.filter(batch_id=batch_id, state=BatchLine.State.PENDING)
    queue = [line async for line in pending.order_by("index")]
    queue.reverse()  # popped from the end: in input order
    running: set[asyncio.Task] = set()
    ending: str | None = None
    while True:
        now = await Batch.objects.filter(pk=batch_id).values_list("status", "expires_at").aget()
        if now[0] == Status.CANCELLING:
            ending = Status.CANCELLED
        elif timezone.now() >= now[1]:
            ending = Status.EXPIRED
        if ending or runner.quitting or not await claim(batch_id):
            break
        while queue and len(running) < width:
            line = execute(queue.pop(), batch.endpoint, caller, runner.slots(caller))
            running.add(asyncio.create_task(line))
        if not running:
            # A line whose outcome could not be stored is still pending: the next scan runs it.
            ending = Status.COMPLETED if not await pending.aexists() else None
            break
        done, running = await asyncio.wait(
            running, timeout=CHECK_SECONDS, return_when=asyncio.FIRST_COMPLETED
        )
        failures = [task.exception() for task in done if task.exception() is not None]
        for failure in failures:
            if not isinstance(failure, Interrupted):
                log.error("batch %s: a line failed", batch_id, exc_info=failure)
        if any(isinstance(failure, Interrupted) for failure in failures):
            break  # the engine is going away: the lines left wait for the next start
    await settle(running, cancel=ending is not None)
    if ending is not None:
        await sync_to_async(finish.end)(batch_id, ending)


async def settle(running: set[asyncio.Task], cancel: bool) -> None:
    """Cancelled lines (their engine jobs released as their contexts close) or, on shutdown,
    lines left to finish; either way none is left running unwatched."""
    for task in running:
        if cancel:
            task.cancel()
    if running:
        await asyncio.wait(running)


async def execute(
    line: BatchLine, endpoint: str, caller: Caller, slots: asyncio.Semaphore | None
) -> None:
    if slots is None:
        await run_and_record(line, endpoint, caller)
        return
    async with slots:
        await run_and_record(line, endpoint, caller)


async def run_and_record(line: BatchLine, endpoint: str, caller: Caller) -> None:
    await BatchLine.objects.filter(pk=line.pk).aupdate(attempts=F("attempts") + 1)
    while True:
        try:
            outcome = await run_line(endpoint, line.body, caller)
        except Retry as wait:  # the engine's admission is full: wait it out, never fail
            await asyncio.sleep(min(wait.after, RETRY_SECONDS))
            continue
        except Interrupted as stopped:
            if stopped.refused:  # turned away by the drain before it ran: not an attempt
                await BatchLine.objects.filter(pk=line.pk).aupdate(attempts=F("attempts") - 1)
            raise
        break
    await finish.record(line, outcome)


_runner: BatchRunner | None = None
_lock = threading.Lock()


def start_batch_runner() -> BatchRunner:
    """This process's runner, started on the first call (`manage.py serve`)."""
    global _runner
    with _lock:
        if _runner is None:
            _runner = BatchRunner()
            _runner.start()
            _runner._ready.wait(10)
        return _runner


def wake_runner() -> None:
    if _runner is not None:
        _runner.wake()


def stop_batch_runner(timeout: float) -> None:
    global _runner
    with _lock:
        runner, _runner = _runner, None
    if runner is not None:
        runner.stop(timeout)
