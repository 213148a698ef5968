"""Engine jobs and sequences built from token ids, for the engine's own unit tests.

The one place that knows how a GenerationJob and a Sequence are constructed: when what the
engine receives changes shape, only this module follows."""

from __future__ import annotations

import queue

from inference.engine.pool import LoadedModel
from inference.engine.sequence import Sequence
from inference.engine.types import GenerationJob, ModelSpec, SamplingParams, TokenPrompt

EOS = 2  # SmolLM2's end token
NO_EOS = {EOS: -100.0}  # banned: runs go to max_tokens


def greedy(max_tokens: int, **extra: object) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=max_tokens, logit_bias=NO_EOS, **extra)


def token_job(
    spec: ModelSpec,
    ids: list[int],
    params: SamplingParams,
    group: str = "",
    owner: str = "",
    stop_strings: tuple[str, ...] = (),
    stop_ids: frozenset[int] = frozenset({EOS}),
) -> GenerationJob:
    """A job for a prompt given as token ids, ending at the end token; its events land in
    `job.events`."""
    events: queue.SimpleQueue = queue.SimpleQueue()
    job = GenerationJob(
        spec=spec,
        prompt=TokenPrompt(tuple(ids)),
        params=params,
        sink=events.put,
        stop_ids=stop_ids,
        stop_strings=stop_strings,
        owner=owner,
        group=group,
    )
    job.events = events  # type: ignore[attr-defined]
    return job


def make_sequence(
    loaded: LoadedModel,
    ids: list[int],
    params: SamplingParams,
    group: str = "",
    owner: str = "",
    stop_ids: frozenset[int] = frozenset({EOS}),
) -> Sequence:
    """What the engine thread makes of a job before handing it to the model's runner."""
    job = token_job(loaded.spec, ids, params, group, owner, stop_ids=stop_ids)
    return Sequence(job, loaded)
