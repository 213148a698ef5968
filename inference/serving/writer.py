"""A request on its way (`Run`: what every dialect's reply writer reads), and the reply writer
each dialect gives: engine events into its wire events, or into its whole response."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from inference.engine.types import Delta, Done, SamplingParams
from inference.protocol.errors import APIError
from inference.serving.context import RequestContext
from inference.serving.generation import Choice, Generation
from inference.serving.plan import Plan
from inference.serving.reply import ReplyParser
from inference.serving.resolve import ResolvedModel
from inference.serving.sse import Wire
from inference.serving.thinking import Thinking


@dataclass
class Run:
    """One request past its admission: its body, the model it resolved to, its plan, what was
    decided for it on that model, and its engine jobs."""

    body: BaseModel
    ctx: RequestContext
    resolved: ResolvedModel
    plan: Plan
    thinking: Thinking | None  # None: the family does not reason, its text is left alone
    params: SamplingParams
    generation: Generation

    @property
    def model(self) -> str:
        """The model as the client named it: replies say what was asked for."""
        return self.body.model  # type: ignore[attr-defined]

    def parser(self) -> ReplyParser:
        """A reply parser for one choice: thinking, text and tool calls split the same way for
        every dialect (serving/reply.py)."""
        return ReplyParser(self.resolved.adapter, self.plan.tool_use, self.thinking)


class ReplyWriter:
    """What one dialect makes of a run. A stream is `opening()`, `feed()` for each engine event,
    `closing()` after the last Done (the pipeline frames and sends them); a reply that fails
    midway ends with `failed()`, or, where that says nothing, as the dialect ends any broken
    stream. A whole answer is `response()`, once every job is done."""

    def __init__(self, run: Run) -> None:
        self.run = run

    def opening(self) -> list[Wire]:
        return []

    def feed(self, choice: Choice, event: Delta | Done) -> list[Wire]:
        raise NotImplementedError

    async def closing(self) -> list[Wire]:
        return []

    async def failed(self, error: APIError) -> list[Wire] | None:
        """The events a reply that failed midway ends with; None: the dialect's stream end."""
        return None

    async def response(self) -> BaseModel:
        raise NotImplementedError
