"""An engine that answers with scripted events, for serving's unit tests: it stands where
`EngineHandle.start` and its `JobStream` do, so Generation and the stream loop run as they
do in production over events a test chooses (Started, Delta, Done, Failed from
engine/types.py). The prompt preparation (serving/prepare.py, the model's tokenizer) is left
out: these tests start from prepared requests."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from inference.adapters import FamilyProfile, get_adapter
from inference.engine.types import (
    INTERACTIVE,
    Delta,
    Done,
    EngineError,
    ErrorKind,
    Event,
    Failed,
    JobRequest,
    ModelSpec,
    SamplingParams,
    Started,
    TokenPrompt,
)
from inference.observability.records import RequestRecord
from inference.serving.context import RequestContext
from inference.serving.generation import Generation
from inference.serving.prompts import PromptJob

SPEC = ModelSpec(model_id="scripted", location="/nowhere")
ADAPTER = get_adapter(FamilyProfile(adapter="chatml"))
DEVICE_LOST = EngineError(ErrorKind.INTERNAL, "device lost")


class ScriptedStream:
    """A JobStream: the scripted (job index, event) pairs in order, then, once every job sent
    Done or Failed, None; `more` adds events later (a stream that is still running)."""

    def __init__(self, count: int, script: Sequence[tuple[int, Event]]) -> None:
        self._queue: asyncio.Queue = asyncio.Queue()
        self._remaining = count
        self.releases = 0
        self.more(script)

    def more(self, script: Sequence[tuple[int, Event]]) -> None:
        for item in script:
            self._queue.put_nowait(item)

    async def next(self) -> tuple[int, Event] | None:
        if not self._remaining:
            return None
        index, event = await self._queue.get()
        self._remaining -= isinstance(event, Done | Failed)
        return index, event

    def release(self) -> None:
        self.releases += 1


@dataclass
class ScriptedEngine:
    script: Sequence[tuple[int, Event]] = ()
    error: EngineError | None = None  # what start raises (admission refused)
    started: list[list[JobRequest]] = field(default_factory=list)
    priorities: list[str] = field(default_factory=list)
    stream: ScriptedStream | None = None

    def start(
        self,
        requests: list[JobRequest],
        owner: str = "",
        group: str = "",
        priority: str = INTERACTIVE,
    ) -> ScriptedStream:
        """As EngineHandle.start (the priority is the request's, kept for the tests to read)."""
        if self.error is not None:
            raise self.error
        self.started.append(requests)
        self.priorities.append(priority)
        self.stream = ScriptedStream(len(requests), self.script)
        return self.stream


@dataclass(eq=False)
class ScriptedContext(RequestContext):
    scripted: ScriptedEngine = field(default_factory=ScriptedEngine)

    @property
    def engine(self) -> ScriptedEngine:  # type: ignore[override]
        return self.scripted


def context(script: Sequence[tuple[int, Event]] = (), **engine) -> ScriptedContext:
    ctx = ScriptedContext("/v1/scripted", scripted=ScriptedEngine(script, **engine))
    ctx.record = RequestRecord(endpoint=ctx.endpoint, id=ctx.id)
    return ctx


def job(ids: tuple[int, ...] = (1, 2, 3)) -> PromptJob:
    return PromptJob(SPEC, ADAPTER, TokenPrompt(ids), SamplingParams(max_tokens=8))


def jobs(prompts: int = 1, n: int = 1) -> list[PromptJob]:
    """n copies per prompt, sharing their prompt object, as the pipeline makes them."""
    out = []
    for p in range(prompts):
        request = job((p + 1, p + 2))
        out += [request] * n
    return out


def reply(text: str, index: int = 0, prompt_tokens: int = 3) -> list[tuple[int, Event]]:
    """A whole reply of one job: Started, one Delta per character, Done."""
    deltas = [(index, Delta(c)) for c in text]
    done = Done("stop", prompt_tokens, len(text))
    return [(index, Started(prompt_tokens)), *deltas, (index, done)]


def broken(text: str, index: int = 0) -> list[tuple[int, Event]]:
    """A reply the engine fails after `text`."""
    return [*reply(text, index)[:-1], (index, Failed(DEVICE_LOST))]


async def generation_of(
    ctx: ScriptedContext, requests: list[PromptJob], prefix: str = "chatcmpl", n: int = 1
) -> Generation:
    return await Generation.start(ctx, requests, prefix, n)
