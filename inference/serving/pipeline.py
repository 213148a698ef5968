"""One pipeline for every dialect: the model resolved, the body mapped into the neutral plan
(the dialect's plan builder), what every plan gets on its model decided once, the engine's jobs
admitted, then one stream loop with one failure branch, or the whole answer."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass

from pydantic import BaseModel

from inference.engine.types import SamplingParams
from inference.protocol.errors import APIError, server_error
from inference.serving.context import RequestContext
from inference.serving.dialect import Dialect, Operation
from inference.serving.generation import Generation
from inference.serving.images import load_images
from inference.serving.plan import Plan, chat_prompt, check_messages, plan_grammar, thinking_of
from inference.serving.prelude import admit
from inference.serving.prompts import Asked, PromptJob
from inference.serving.resolve import ResolvedModel
from inference.serving.sampling import per_choice, sampling_params
from inference.serving.sse import EventStream, Trimmed, Wire
from inference.serving.thinking import Thinking
from inference.serving.writer import ReplyWriter, Run

log = logging.getLogger(__name__)


async def answer(dialect: Dialect, body: BaseModel, ctx: RequestContext) -> BaseModel | EventStream:
    """A generation endpoint's answer in `dialect`: its stream, or its whole response. Every
    failure before the stream's first line is an HTTP error (APIError)."""
    operation = dialect.operation(body)
    writer = operation.writer(await start_run(ctx, operation, body))
    if getattr(body, "stream", False):
        return event_stream(dialect, writer)
    await writer.run.generation.finish()
    return await writer.response()


@dataclass(frozen=True)
class Shaped:
    """What a plan comes to on its model."""

    prompts: list[Asked]
    params: SamplingParams
    thinking: Thinking | None


async def shape(plan: Plan, resolved: ResolvedModel) -> Shaped:
    """The message cap, the grammar, thinking and the sampling parameters (each a 400 when
    wrong), before the images are fetched and decoded; then the prompts."""
    check_messages(plan)
    grammar = plan_grammar(plan, resolved.adapter)
    thinking = thinking_of(plan, resolved.adapter, grammar)
    params = sampling_params(plan.sampling, resolved.entry, grammar)
    if plan.raw_prompts:
        return Shaped(list(plan.raw_prompts), params, thinking.thinking)
    spec = resolved.spec
    images = await load_images(list(plan.images), spec.model_id, spec.vision)
    return Shaped([chat_prompt(plan, resolved, thinking, images)], params, thinking.thinking)


async def start_run(ctx: RequestContext, operation: Operation, body: BaseModel) -> Run:
    """Admits the request (prelude.admit: the drain check, its model, the record's model),
    plans, and has the engine admit every choice; failures raise."""
    resolved = await admit(ctx, body.model)  # type: ignore[attr-defined]
    plan = await operation.plan(body, resolved, ctx)
    shaped = await shape(plan, resolved)
    jobs = [
        PromptJob(resolved.spec, resolved.adapter, prompt, params, echo=plan.echo)
        for prompt in shaped.prompts
        for params in per_choice(shaped.params, plan.n)
    ]
    generation = await Generation.start(ctx, jobs, operation.id_prefix, plan.n)
    return Run(body, ctx, resolved, plan, shaped.thinking, shaped.params, generation)


class Sent:
    """What a stream has sent, as its client counts: for a dialect that numbers its events
    (Responses' sequence_number), the number the next one carries, so that an error event
    ending it follows the last event sent, whatever a writer numbered and never sent."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.next = 0

    def frame(self, event: Wire) -> str:
        payload = event.payload if isinstance(event, Trimmed) else event
        number = getattr(payload, "sequence_number", None)
        if number is not None:
            self.next = number + 1
        return self.dialect.frame(event)

    def end(self, error: APIError) -> list[str]:
        return self.dialect.stream_end(error, self.next)


def event_stream(dialect: Dialect, writer: ReplyWriter) -> EventStream:
    sent = Sent(dialect)
    return EventStream(stream_lines(writer, sent), sent.end, dialect.media_type)


async def stream_lines(writer: ReplyWriter, sent: Sent) -> AsyncIterator[str]:
    """The one stream loop, for every dialect: the writer's opening events, its events for each
    engine event, its closing ones, each framed as the dialect frames them, then the dialect's
    done line. Whatever breaks it midway ends it in the one failure branch."""
    try:
        for event in writer.opening():
            yield sent.frame(event)
        async with aclosing(writer.run.generation.events()) as events:
            async for choice, event in events:
                for wire in writer.feed(choice, event):
                    yield sent.frame(wire)
        for wire in await writer.closing():
            yield sent.frame(wire)
    except Exception as exc:  # a job failed, the deadline passed, or a bug on the way
        for line in await failure_lines(writer, sent, exc):
            yield line
        return
    if sent.dialect.done:
        yield sent.dialect.done


async def failure_lines(writer: ReplyWriter, sent: Sent, exc: Exception) -> list[str]:
    """An APIError (a job failed, the deadline passed) ends the reply as its writer says, or
    as the dialect ends a broken stream; anything else is a bug, logged, and the client reads
    a generic server error."""
    if not isinstance(exc, APIError):
        log.error("stream %s failed", writer.run.ctx.id, exc_info=exc)
        return sent.end(server_error())
    try:
        events = await writer.failed(exc)
    except Exception:
        log.exception("ending the failed stream %s", writer.run.ctx.id)
        return sent.end(server_error())
    if events is None:
        return sent.end(exc)
    done = sent.dialect.done
    return [sent.frame(event) for event in events] + ([done] if done else [])
