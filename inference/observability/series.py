"""The dashboard's history: every INTERVAL seconds one sample of the engine's health and of the
requests finished since the previous sample, kept for the last SPAN seconds in a bounded ring.
One ring per process: behind a load balancer each instance shows its own."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from inference.engine.state import EngineHealth

log = logging.getLogger(__name__)
INTERVAL = 5.0  # seconds between samples
SPAN = 3600.0  # seconds kept
ALL = "all models"  # the label of a quantity the engine counts only in total

Values = dict[str, float | None]  # label (a model, or a part of memory) -> value; None: no data


class Finished(Protocol):
    """What a sample takes from a finished request (a RequestRecord)."""

    model: str
    prompt_tokens: int
    cached_tokens: int
    time_to_first_token: float | None


@dataclass
class _Requests:
    """One model's requests finished since the last sample."""

    prompt: int = 0
    cached: int = 0
    first_tokens: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Sample:
    at: float  # wall clock, for the charts' time axis
    quantities: dict[str, Values]


class Series:
    """Thread-safe: requests are observed from request threads, samples taken by the sampler's."""

    def __init__(self, interval: float = INTERVAL, span: float = SPAN) -> None:
        self.interval = interval
        self.span = span
        self._samples: deque[Sample] = deque(maxlen=int(span // interval))
        self._lock = threading.Lock()
        self._requests: dict[str, _Requests] = {}
        self._since = time.monotonic()
        # Each model's speculation counters at the last sample: acceptance is per interval.
        self._drafts: dict[str, tuple[int, int]] = {}

    def begin(self) -> None:
        """The first interval starts now (when sampling starts), not when this was made."""
        with self._lock:
            if not self._samples:
                self._since = time.monotonic()

    def observe(self, record: Finished) -> None:
        if not record.model:  # refused before a model served it: nothing read or generated
            return
        with self._lock:
            requests = self._requests.setdefault(record.model, _Requests())
            requests.prompt += record.prompt_tokens
            requests.cached += record.cached_tokens
            if record.time_to_first_token is not None:
                requests.first_tokens.append(record.time_to_first_token)

    def sample(self, health: EngineHealth | None, rss: int | None, at: float | None = None) -> None:
        """Closes the current interval: what the engine reports now, what finished since."""
        now = time.monotonic()
        with self._lock:
            seconds = max(now - self._since, 1e-3)
            requests, self._requests, self._since = self._requests, {}, now
            quantities = _from_health(health, self._drafts)
            quantities.update(_from_requests(requests, seconds))
            # A loaded model that finished nothing read nothing: 0, where a time to first
            # token or a hit rate has no value at all.
            for m in health.models if health is not None else ():
                quantities["prompt_tokens_per_second"].setdefault(m.id, 0.0)
            quantities["memory"]["process RSS"] = rss
            self._samples.append(Sample(time.time() if at is None else at, quantities))

    def samples(self) -> list[Sample]:
        with self._lock:
            return list(self._samples)

    def document(self) -> dict:
        """Columns for the charts: the times, and per quantity each label's values at those
        times (None where a label had no value then: a model not yet loaded, no request)."""
        samples = self.samples()
        quantities: dict[str, dict[str, list[float | None]]] = {}
        for name in QUANTITIES:
            labels = sorted({label for s in samples for label in s.quantities.get(name, {})})
            quantities[name] = {
                label: [s.quantities.get(name, {}).get(label) for s in samples] for label in labels
            }
        return {
            "interval_seconds": self.interval,
            "span_seconds": self.span,
            "at": [round(s.at, 3) for s in samples],
            "quantities": quantities,
        }


QUANTITIES = (
    "generated_tokens_per_second",
    "prompt_tokens_per_second",
    "running",
    "queued",
    "time_to_first_token",
    "memory",
    "prefix_cache_hit_rate",
    "draft_acceptance",
)


def _from_health(health: EngineHealth | None, drafts: dict[str, tuple[int, int]]) -> dict:
    """What the engine's snapshot says now; `drafts` (the speculation counters at the last
    sample) is brought up to date."""
    models = health.models if health is not None else ()
    acceptance: Values = {}
    for m in models:
        drafted, kept = drafts.get(m.id, (0, 0))
        if m.draft_tokens < drafted:  # reloaded since: its counters started again
            drafted, kept = 0, 0
        fed = m.draft_tokens - drafted
        acceptance[m.id] = round((m.accepted_draft_tokens - kept) / fed, 4) if fed else None
        drafts[m.id] = (m.draft_tokens, m.accepted_draft_tokens)
    for gone in set(drafts) - {m.id for m in models}:
        del drafts[gone]
    return {
        # The engine's own rate: decode steps of its last 10 seconds (engine/batching.py).
        "generated_tokens_per_second": {m.id: m.tokens_per_second for m in models},
        "running": {m.id: m.active_sequences for m in models},
        "queued": {ALL: health.queued} if health is not None else {},
        "memory": {
            "weights": health.used_bytes if health is not None else None,
            "prefix cache": sum(m.prefix_cache_bytes for m in models) if models else None,
        },
        "draft_acceptance": acceptance,
    }


def _from_requests(requests: dict[str, _Requests], seconds: float) -> dict:
    """Requests finished in the interval, per model: the prompt tokens read (those the prefix
    cache did not hold) per second, the share it held, and the times to first token."""
    ttft: Values = {}
    for model, r in requests.items():
        if r.first_tokens:
            ordered = sorted(r.first_tokens)
            ttft[f"{model} p50"] = round(percentile(ordered, 0.5), 4)
            ttft[f"{model} p95"] = round(percentile(ordered, 0.95), 4)
    return {
        "prompt_tokens_per_second": {
            model: round((r.prompt - r.cached) / seconds, 2) for model, r in requests.items()
        },
        "prefix_cache_hit_rate": {
            model: round(r.cached / r.prompt, 4) if r.prompt else None
            for model, r in requests.items()
        },
        "time_to_first_token": ttft,
    }


def percentile(ordered: list[float], share: float) -> float:
    """Nearest rank: the smallest value with at least `share` of the values at or below it."""
    rank = max(1, -(-len(ordered) * share // 1))  # ceil, at least the first
    return ordered[int(rank) - 1]


class Sampler:
    """Takes a sample every `series.interval` seconds on its own daemon thread, started by the
    first request recorded or the first look at the dashboard's history."""

    def __init__(
        self,
        series: Series,
        read_health: Callable[[], EngineHealth | None],
        read_rss: Callable[[], int | None],
    ) -> None:
        self.series = series
        self._read_health = read_health
        self._read_rss = read_rss
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def start(self) -> None:
        with self._lock:
            if self._thread is None:
                self.series.begin()
                self._thread = threading.Thread(
                    target=self._run, name="dashboard-sampler", daemon=True
                )
                self._thread.start()

    def stop(self) -> None:
        """For tests: ends the thread after its current sample."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.series.interval):
            try:
                self.series.sample(self._read_health(), self._read_rss())
            except Exception:  # one bad sample must not end the history
                log.exception("sampling the dashboard's history")
