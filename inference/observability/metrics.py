"""Prometheus metrics: counters and histograms updated as requests run, and gauges read from
the engine at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from django.conf import settings
from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from inference.engine.state import EngineHealth, PrefixDiskState
from inference.runtime import current_health

registry = CollectorRegistry()
ProcessCollector(registry=registry)  # RSS, CPU seconds, open files of this process

# Latency buckets from a fast GPU token to a slow CPU prefill of a long prompt.
LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

REQUESTS = Counter(
    "inference_requests",
    "Requests to /v1 by endpoint, model and HTTP status.",
    ["endpoint", "model", "status"],
    registry=registry,
)
PROMPT_TOKENS = Counter(
    "inference_prompt_tokens", "Prompt tokens processed.", ["model"], registry=registry
)
GENERATED_TOKENS = Counter(
    "inference_generation_tokens", "Tokens generated.", ["model"], registry=registry
)
TIME_TO_FIRST_TOKEN = Histogram(
    "inference_time_to_first_token_seconds",
    "From the request's arrival to its first generated token.",
    ["model"],
    buckets=LATENCY,
    registry=registry,
)
INTER_TOKEN_LATENCY = Histogram(
    "inference_inter_token_latency_seconds",
    "Between consecutive tokens of one answer.",
    ["model"],
    buckets=LATENCY,
    registry=registry,
)
REQUEST_DURATION = Histogram(
    "inference_request_duration_seconds",
    "From the request's arrival to its last byte.",
    ["endpoint", "model"],
    buckets=LATENCY,
    registry=registry,
)


class EngineCollector(Collector):
    """What the engine is doing now, read when Prometheus scrapes (never starts the engine)."""

    def __init__(self, read_health: Callable[[], EngineHealth | None]) -> None:
        self._read_health = read_health

    def collect(self) -> Iterator:
        health = self._read_health()
        running = GaugeMetricFamily("inference_requests_running", "Sequences being decoded now.")
        queued = GaugeMetricFamily(
            "inference_requests_queued", "Sequences waiting for prefill or a batch slot."
        )
        # Of those, the batch-priority ones (the Batch API's lines, run below interactive work).
        batch_running = GaugeMetricFamily(
            "inference_batch_requests_running", "Batch-priority sequences being decoded now."
        )
        batch_queued = GaugeMetricFamily(
            "inference_batch_requests_queued",
            "Batch-priority sequences waiting for prefill or a batch slot.",
        )
        loaded = GaugeMetricFamily("inference_models_loaded", "Models in the pool.")
        memory = GaugeMetricFamily(
            "inference_model_memory_bytes", "Weights in memory per model.", labels=["model"]
        )
        evictions = CounterMetricFamily(
            "inference_model_evictions", "Models unloaded to make room or for being idle."
        )
        restarts = CounterMetricFamily(
            "inference_engine_restarts", "Times the supervisor replaced a dead or wedged engine."
        )
        models = health.models if health else ()
        running.add_metric([], health.state.decoding if health else 0)
        queued.add_metric([], health.queued if health else 0)
        batch_running.add_metric([], health.state.decoding_batch if health else 0)
        batch_queued.add_metric([], health.queued_batch if health else 0)
        loaded.add_metric([], len(models))
        for model in models:
            memory.add_metric([model.id], model.bytes)
        evictions.add_metric([], health.evictions if health else 0)
        restarts.add_metric([], health.restarts if health else 0)
        yield from (running, queued, batch_running, batch_queued, loaded, memory)
        yield from (evictions, restarts)
        yield from speculation_metrics(models)
        disk = health.state.prefix_disk if health else None
        if disk is not None:
            yield from prefix_disk_metrics(disk)


def speculation_metrics(models) -> Iterator:
    """Speculative decoding per loaded model: draft tokens checked, those the model kept, and
    the share kept (what tells an operator whether a model's default pays)."""
    drafted = CounterMetricFamily(
        "inference_draft_tokens", "Draft tokens verified in decode steps.", labels=["model"]
    )
    accepted = CounterMetricFamily(
        "inference_draft_tokens_accepted",
        "Draft tokens the model's own choice confirmed (each saves a decode step).",
        labels=["model"],
    )
    rate = GaugeMetricFamily(
        "inference_draft_acceptance_rate",
        "Accepted over verified draft tokens since the model loaded.",
        labels=["model"],
    )
    steps = CounterMetricFamily(
        "inference_verify_steps",
        "Decode steps that verified drafts.",
        labels=["model"],
    )
    replays = CounterMetricFamily(
        "inference_verify_replays",
        "Verification steps that fed the kept tokens again to recurrent state, which cannot "
        "drop a rejected draft's positions (a second pass each).",
        labels=["model"],
    )
    by_drafter = CounterMetricFamily(
        "inference_drafter_tokens",
        "Draft tokens verified, per drafter (ngram, draft_model, mtp).",
        labels=["model", "drafter"],
    )
    kept_by_drafter = CounterMetricFamily(
        "inference_drafter_tokens_accepted",
        "Draft tokens kept, per drafter (ngram, draft_model, mtp).",
        labels=["model", "drafter"],
    )
    for model in models:
        for kind, (fed, kept) in sorted(model.drafters.items()):
            by_drafter.add_metric([model.id, kind], fed)
            kept_by_drafter.add_metric([model.id, kind], kept)
        drafted.add_metric([model.id], model.draft_tokens)
        accepted.add_metric([model.id], model.accepted_draft_tokens)
        steps.add_metric([model.id], model.verify_steps)
        replays.add_metric([model.id], model.replayed_steps)
        if model.draft_tokens:
            rate.add_metric([model.id], model.accepted_draft_tokens / model.draft_tokens)
    yield from (drafted, accepted, rate, steps, replays, by_drafter, kept_by_drafter)


def prefix_disk_metrics(disk: PrefixDiskState) -> Iterator:
    """The prefix cache's disk tier: its folder's size, and its reads and writes."""
    gauges = {
        "bytes": ("Bytes of prompt KV in the prefix cache's folder.", disk.bytes),
        "entries": ("Prompt prefixes kept in the prefix cache's folder.", disk.entries),
    }
    counters = {
        "hits": ("Prompt prefixes read from the disk tier.", disk.hits),
        "misses": ("Memory misses the disk tier could not serve either.", disk.misses),
        "failed_reads": ("Unreadable files (corrupt, truncated), deleted.", disk.failed_reads),
        "writes": ("Prompt prefixes written to the disk tier.", disk.writes),
        "dropped_writes": ("Prefixes not written: the writer was behind.", disk.dropped_writes),
        "failed_writes": ("Prefixes whose file could not be written.", disk.failed_writes),
    }
    for name, (text, number) in gauges.items():
        yield GaugeMetricFamily(f"inference_prefix_cache_disk_{name}", text, value=number)
    for name, (text, number) in counters.items():
        yield CounterMetricFamily(f"inference_prefix_cache_disk_{name}", text, value=number)


class InstanceCollector(Collector):
    """Which replica answered the scrape: inference_server_instance_info{server_instance=...} 1.
    Its own label name, as Prometheus puts the scrape target in `instance` already."""

    def collect(self) -> Iterator:
        info = InfoMetricFamily("inference_server_instance", "This server instance's name.")
        info.add_metric([], {"server_instance": settings.INSTANCE_NAME})
        yield info


registry.register(EngineCollector(current_health))
registry.register(InstanceCollector())
