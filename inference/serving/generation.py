"""Starting a request's engine jobs, and gathering their events choice by choice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field

from django.conf import settings

from inference.engine.client import JobRequest, generate
from inference.engine.types import (
    Delta,
    Done,
    EngineError,
    ErrorKind,
    Event,
    Failed,
    Started,
    TokenLogprob,
)
from inference.protocol.common import PromptTokensDetails, Usage
from inference.protocol.errors import APIError
from inference.serving.errors import api_error
from inference.serving.ids import completion_id, now, system_fingerprint


@dataclass
class Choice:
    """One choice's output so far."""

    index: int
    started: Started
    parts: list[str] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
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


async def _before(deadline: float, awaitable):
    """Awaits, or raises the timeout error once the request's deadline passes. The engine
    drops the request's sequences when its event stream is closed."""
    try:
        async with asyncio.timeout_at(deadline):
            return await awaitable
    except TimeoutError:
        raise api_error(TIMEOUT) from None


class Generation:
    """A request's jobs, all admitted by the engine (early failures were raised as HTTP errors)."""

    def __init__(
        self,
        stream,
        started: dict[int, Started],
        early: list[tuple[int, Event]],
        deadline: float,
        id: str,
    ) -> None:
        self._stream = stream
        self._early = early
        self._deadline = deadline
        self.choices = {i: Choice(i, s) for i, s in sorted(started.items())}
        self.id = id
        self.created = now()

    @classmethod
    async def start(cls, requests: list[JobRequest], id_prefix: str) -> Generation:
        stream = generate(requests)
        started: dict[int, Started] = {}
        early: list[tuple[int, Event]] = []
        deadline = asyncio.get_running_loop().time() + settings.REQUEST_TIMEOUT
        try:
            while len(started) < len(requests):
                index, event = await _before(deadline, anext(stream))
                if isinstance(event, Failed):
                    raise api_error(event.error)
                if isinstance(event, Started):
                    started[index] = event
                else:
                    early.append((index, event))
        except BaseException:
            await stream.aclose()
            raise
        return cls(stream, started, early, deadline, completion_id(id_prefix))

    async def events(self) -> AsyncIterator[tuple[Choice, Delta | Done | Failed]]:
        """Each event with its choice, already recorded there; ends after the last Done."""
        async with aclosing(self._stream) as stream:
            for index, event in self._early:
                yield self._record(index, event)
            while True:
                try:
                    index, event = await _before(self._deadline, anext(stream))
                except StopAsyncIteration:
                    return
                except APIError:  # the deadline passed
                    yield next(iter(self.choices.values())), Failed(TIMEOUT)
                    return
                yield self._record(index, event)

    def envelope(self, model: str) -> dict:
        """The fields every response and chunk of this request shares."""
        return {
            "id": self.id,
            "created": self.created,
            "model": model,
            "system_fingerprint": system_fingerprint(),
        }

    def _record(self, index: int, event: Event) -> tuple[Choice, Delta | Done | Failed]:
        choice = self.choices[index]
        if isinstance(event, Delta | Done):
            choice.add(event)
        return choice, event  # type: ignore[return-value]

    async def finish(self) -> None:
        """Runs every job to its end (non-streaming responses)."""
        async for _, event in self.events():
            if isinstance(event, Failed):
                raise api_error(event.error)

    def usage(self, prompts_counted: list[int] | None = None) -> Usage:
        """Prompt tokens count once per distinct prompt (n choices share theirs)."""
        counted = prompts_counted if prompts_counted is not None else [0]
        prompt = sum(self.choices[i].started.prompt_tokens for i in counted)
        cached = sum(self.choices[i].started.cached_tokens for i in counted)
        completion = sum(c.done.completion_tokens for c in self.choices.values() if c.done)
        return Usage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=cached),
        )
