"""One record per /v1 request: filled in by the edge (endpoint, key, status, time) and by the
generation (model, tokens, time to first token), finished when the response is done, then
counted in the metrics, logged as one JSON line, and kept among the recent ones."""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from dataclasses import asdict, dataclass, field

from django.conf import settings

from inference.observability import metrics
from inference.observability.history import history, sampler

log = logging.getLogger("inference.requests")
RECENT = 50


@dataclass
class RequestRecord:
    endpoint: str
    id: str
    key: str = "anonymous"
    model: str = ""  # the catalog model that served it ("" if none did)
    # What the request asked for (its body's "model"), kept when it was refused too (unknown
    # model, bad key, invalid body); never a metric label, as a client may send anything.
    asked_model: str = ""
    status: int = 0
    stream: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    finish_reason: str | None = None
    error_code: str | None = None
    time_to_first_token: float | None = None
    duration: float = 0.0
    at: float = field(default_factory=time.time)  # wall clock, for people
    _started: float = field(default_factory=time.monotonic, repr=False)
    _last_token: float | None = field(default=None, repr=False)
    _finished: bool = field(default=False, repr=False)

    def on_token(self) -> None:
        now = time.monotonic()
        if self._last_token is None:
            self.time_to_first_token = now - self._started
            metrics.TIME_TO_FIRST_TOKEN.labels(self.model).observe(self.time_to_first_token)
        else:
            metrics.INTER_TOKEN_LATENCY.labels(self.model).observe(now - self._last_token)
        self._last_token = now

    def finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        self.duration = time.monotonic() - self._started
        self._count()
        sampler.start()
        history.observe(self)
        recent.appendleft(self.public())
        if settings.REQUEST_LOG_JSON:
            log.info(json.dumps(self.public(), separators=(",", ":")))

    def _count(self) -> None:
        metrics.REQUESTS.labels(self.endpoint, self.model, str(self.status)).inc()
        metrics.REQUEST_DURATION.labels(self.endpoint, self.model).observe(self.duration)
        if self.model:
            metrics.PROMPT_TOKENS.labels(self.model).inc(self.prompt_tokens)
            metrics.GENERATED_TOKENS.labels(self.model).inc(self.completion_tokens)

    def public(self) -> dict:
        data = {k: v for k, v in asdict(self).items() if not k.startswith("_")}
        data["duration"] = round(self.duration, 4)
        if self.time_to_first_token is not None:
            data["time_to_first_token"] = round(self.time_to_first_token, 4)
        return data


recent: deque[dict] = deque(maxlen=RECENT)
