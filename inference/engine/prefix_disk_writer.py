"""The disk tier's writer thread (prefix_disk.py): a bounded queue of entries to write, and the
thread that takes them at idle priority.

Apart from the store so that the thread's life (started on the first entry, stopped after what is
queued) and its scheduling read in one place; what writing an entry means stays the store's.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
import time
from collections.abc import Callable

from inference.engine import kv_file

QUEUE_SIZE = 4  # entries waiting for the writer: each holds its KV arrays alive
WRITER_NICENESS = 10
_STOP = object()


class WriterThread:
    """`put` on the engine thread never waits: a full queue refuses the entry."""

    def __init__(self, write: Callable[[str, kv_file.Prepared], None]) -> None:
        self._write = write
        self._queue: queue.Queue = queue.Queue(QUEUE_SIZE)
        self._thread: threading.Thread | None = None

    def full(self) -> bool:
        return self._queue.full()

    def put(self, name: str, prepared: kv_file.Prepared) -> bool:
        """Queues the entry for writing; False if the queue is full."""
        self._start()
        try:
            self._queue.put_nowait((name, prepared))
        except queue.Full:
            return False
        return True

    def flush(self, timeout: float) -> bool:
        """Waits until every queued entry is written (or `timeout`); whether it was."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def stop(self) -> None:
        """Writes what is queued, then ends the thread."""
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._loop, name="prefix-disk-writer", daemon=True
            )
            self._thread.start()

    def _loop(self) -> None:
        if sys.platform == "linux":  # there a thread has its own policy (not on macOS)
            # Writing a file must not slow the engine's steps: on a busy CPU the engine wins.
            # SCHED_IDLE runs only on a core nothing else wants; a nice value still took
            # slices from the kernels' threads.
            me = threading.get_native_id()
            try:
                os.sched_setscheduler(me, os.SCHED_IDLE, os.sched_param(0))
            except OSError:
                with contextlib.suppress(OSError):
                    os.setpriority(os.PRIO_PROCESS, me, WRITER_NICENESS)
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                self._write(*item)
            finally:
                self._queue.task_done()
