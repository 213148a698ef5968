"""Starting a request's engine jobs, and gathering their events choice by choice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from django.conf import settings

from inference.engine.handle import JobStream
from inference.engine.types import (
    BATCH,
    INTERACTIVE,
    Delta,
    Done,
    EngineError,
    ErrorKind,
    Event,
    Failed,
    SampledToken,
    Started,
)
from inference.protocol.errors import APIError
from inference.serving.context import RequestContext
from inference.serving.drain import SHUTTING_DOWN, drain, refuse_if_draining
from inference.serving.errors import api_error
from inference.serving.ids import completion_id, now
from inference.serving.prepare import prepare_requests
from inference.serving.prompts import PromptJob
from inference.serving.usage import TokenUsage


@dataclass
class Choice:
    """One choice's output so far."""

    index: int
    started: Started
    parts: list[str] = field(default_factory=list)
    logprobs: list[SampledToken] = field(default_factory=list)
    done: Done | None = None

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def add(self, event: Delta | Done) -> None:
        if isinstance(event, Delta):
            self.parts.append(event.text)
            self.logprobs.extend(event.logprobs)
        else:
            self.done = event


TIMEOUT = EngineError(ErrorKind.TIMEOUT, "The request took longer than the server allows.")
# How many messages the catalog's truncate_middle policy left out of the prompt (the usage
# says it too, as truncated_messages). Known once the engine admitted the request, so before
# a stream's first line.
TRUNCATED_HEADER = "X-Context-Truncated-Messages"


def check_sequence_count(count: int, priority: str = INTERACTIVE) -> None:
    """A request larger than the queue could ever hold gets a 400, not a 429 forever."""
    queue = "MAX_QUEUED_BATCH_REQUESTS" if priority == BATCH else "MAX_QUEUED_REQUESTS"
    limit, setting = min(
        (settings.MAX_REQUEST_SEQUENCES, "MAX_REQUEST_SEQUENCES"),
        (getattr(settings, queue), queue),
    )
    if count > limit:
        raise APIError(
            f"This request asks for {count} sequences (prompts x n); this server runs at most "
            f"{limit} for one request ({setting}).",
            param="n",
            code="too_many_sequences",
        )


class Generation:
    """A request's jobs, all admitted by the engine (early failures were raised as HTTP errors).

    Every wait for the engine is bounded by the request's deadline, which a graceful shutdown
    may bring forward (cut_at). The engine drops the request's sequences when the job stream is
    released: after the last event, or when the request context closes (client gone)."""

    def __init__(
        self, stream: JobStream, ctx: RequestContext, id: str, choices_per_prompt: int = 1
    ) -> None:
        self._stream = stream
        self._per_prompt = choices_per_prompt
        self._record = ctx.record
        self._early: list[tuple[int, Event]] = []
        self._deadline = asyncio.get_running_loop().time() + settings.REQUEST_TIMEOUT
        self._expired = TIMEOUT
        self._waiting: asyncio.Timeout | None = None
        self.choices: dict[int, Choice] = {}
        self.id = id
        self.created = now()
        drain.register(self)

    @classmethod
    async def start(
        cls,
        ctx: RequestContext,
        requests: list[PromptJob],
        id_prefix: str,
        choices_per_prompt: int = 1,
    ) -> Generation:
        refuse_if_draining()
        check_sequence_count(len(requests), ctx.priority)
        # Off the engine thread, before admission: a request over the limits costs nothing.
        requests = await prepare_requests(requests)
        try:
            stream = ctx.engine.start(
                requests, owner=ctx.caller.name, group=ctx.id, priority=ctx.priority
            )
        except EngineError as exc:
            raise api_error(exc) from None
        generation = cls(stream, ctx, completion_id(id_prefix), choices_per_prompt)
        ctx.on_close(generation.close)
        try:
            await generation._admit(len(requests))
        except BaseException:
            generation.close()
            raise
        if truncated := generation.truncated_messages():
            ctx.headers[TRUNCATED_HEADER] = str(truncated)
        return generation

    def close(self) -> None:
        """Frees the engine's sequences and counts the tokens into the request's record; safe
        to call again (the request context calls it whatever way the request ended)."""
        self._stream.release()
        self._report()

    async def _admit(self, count: int) -> None:
        started: dict[int, Started] = {}
        while len(started) < count:
            item = await self._next()
            if item is None:  # unreachable: every job sends Started or Failed first
                raise api_error(EngineError(ErrorKind.INTERNAL, "no events"))
            index, event = item
            if isinstance(event, Failed):
                raise api_error(event.error)
            if isinstance(event, Started):
                started[index] = event
            else:
                self._early.append((index, event))
        self.choices = {i: Choice(i, s) for i, s in sorted(started.items())}

    def cut_at(self, deadline: float) -> None:
        """Shutdown: whatever is still running at `deadline` ends with SHUTTING_DOWN."""
        if deadline < self._deadline:
            self._deadline = deadline
            self._expired = SHUTTING_DOWN
            if self._waiting is not None:
                self._waiting.reschedule(deadline)

    async def _next(self) -> tuple[int, Event] | None:
        try:
            async with asyncio.timeout_at(self._deadline) as self._waiting:
                return await self._stream.next()
        except TimeoutError:
            raise api_error(self._expired) from None
        finally:
            self._waiting = None

    async def events(self) -> AsyncIterator[tuple[Choice, Delta | Done]]:
        """Each event with its choice, already recorded there; ends after the last Done. A
        job that failed, or the deadline passing, raises the APIError its client reads (a
        stream's one failure branch writes it in the stream's dialect)."""
        try:
            for index, event in self._early:
                yield self._add(index, event)
            while True:
                try:
                    item = await self._next()
                except APIError as error:  # the deadline passed
                    raise self._failed(error) from None
                if item is None:
                    return
                yield self._add(*item)
        finally:
            self.close()

    def _add(self, index: int, event: Event) -> tuple[Choice, Delta | Done]:
        if isinstance(event, Failed):
            raise self._failed(api_error(event.error))
        choice = self.choices[index]
        if isinstance(event, Delta | Done):
            choice.add(event)
        if self._record is not None and isinstance(event, Delta):
            self._record.on_token()
        return choice, event  # type: ignore[return-value]

    def _failed(self, error: APIError) -> APIError:
        if self._record is not None:
            self._record.error_code = error.code
        return error

    def _report(self) -> None:
        if self._record is None or not self.choices:
            return
        usage = self.usage()
        self._record.prompt_tokens = usage.prompt
        self._record.completion_tokens = usage.completion
        self._record.cached_tokens = usage.cached
        reasons = {c.done.finish_reason for c in self.choices.values() if c.done}
        self._record.finish_reason = ",".join(sorted(reasons)) or None

    async def finish(self) -> None:
        """Runs every job to its end (non-streaming responses); a failure raises."""
        async for _ in self.events():
            pass

    def _per_distinct_prompt(self) -> list[Started]:
        """One Started per distinct prompt: n choices share theirs."""
        return [self.choices[i].started for i in range(0, len(self.choices), self._per_prompt)]

    def truncated_messages(self) -> int:
        return sum(s.truncated_messages for s in self._per_distinct_prompt())

    def usage(self) -> TokenUsage:
        """Prompt tokens count once per distinct prompt; completion tokens of the choices done
        so far."""
        started = self._per_distinct_prompt()
        return TokenUsage(
            prompt=sum(s.prompt_tokens for s in started),
            completion=sum(c.done.completion_tokens for c in self.choices.values() if c.done),
            cached=sum(s.cached_tokens for s in started),
            truncated_messages=self.truncated_messages(),
        )
