"""One request's context, made at the edge and passed down to serving: who is calling, the
record that ends up in metrics and logs, the engine, and what to release when it is over."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from apikeys.auth import ANONYMOUS, Caller
from inference import runtime
from inference.engine.handle import EngineHandle
from inference.engine.types import INTERACTIVE
from inference.observability.records import RequestRecord

log = logging.getLogger(__name__)


def request_id() -> str:
    return f"req_{uuid.uuid4().hex[:24]}"


@dataclass(eq=False)
class RequestContext:
    endpoint: str  # the route pattern, so model ids in URLs never become metric labels
    record: RequestRecord | None = None  # None for endpoints that are not recorded
    caller: Caller = ANONYMOUS
    id: str = field(default_factory=request_id)
    # When the request came in (monotonic clock): what Ollama's replies time themselves from.
    started: float = field(default_factory=time.monotonic)
    # "interactive", or "batch" for work that runs in what interactive requests leave (the
    # Batch API's lines): carried on every engine job the request makes (engine/scheduling.py).
    priority: str = INTERACTIVE
    # Set by serving before the view returns (a stream's headers go out with its first line);
    # the edge puts them on the response.
    headers: dict[str, str] = field(default_factory=dict)
    _closers: list[Callable[[], None]] = field(default_factory=list, repr=False)
    _closed: bool = field(default=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def recorded(cls, endpoint: str) -> RequestContext:
        ctx = cls(endpoint)
        ctx.record = RequestRecord(endpoint=endpoint, id=ctx.id)
        return ctx

    @property
    def engine(self) -> EngineHandle:
        return runtime.engine_handle()

    def identify(self, caller: Caller) -> None:
        self.caller = caller
        if self.record is not None:
            self.record.key = caller.name

    def on_close(self, callback: Callable[[], None]) -> None:
        """Runs `callback` once when the request is over: its response sent, its stream
        finished or abandoned, or its handling failed or cancelled."""
        with self._lock:
            closed = self._closed
            if not closed:
                self._closers.append(callback)
        if closed:
            callback()

    def close(self) -> None:
        """Idempotent and thread-safe (Django closes responses from a worker thread)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            closers, self._closers = self._closers, []
        for callback in closers:
            try:
                callback()
            except Exception:  # the rest must still run: slots, jobs, the record
                log.exception("closing request %s", self.id)
        if self.record is not None:
            self.record.finish()
