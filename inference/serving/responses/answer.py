"""POST /v1/responses: a validated request to a response object, or to its typed event
stream. Finished responses (completed, incomplete, or failed mid-stream) are stored unless the
request said `store: false`; a stream whose client leaves before its end stores nothing."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field

from inference.engine.types import Delta, Done, Failed, JobRequest
from inference.protocol.errors import APIError, server_error
from inference.protocol.openai.responses import (
    IncompleteDetails,
    InputTokensDetails,
    OutputTokensDetails,
    ReasoningConfig,
    ResponseError,
    ResponseObject,
    ResponseRequest,
    ResponseUsage,
)
from inference.protocol.openai.responses_events import ErrorEvent, ResponseLifecycleEvent
from inference.serving.context import RequestContext
from inference.serving.errors import api_error
from inference.serving.generation import Generation
from inference.serving.ids import now
from inference.serving.reply import ReasoningDelta, ReplyParser
from inference.serving.resolve import resolve_model
from inference.serving.responses import store
from inference.serving.responses.items import new_id
from inference.serving.responses.output import OutputBuilder
from inference.serving.responses.prepare import (
    conversation_images,
    gather_conversation,
    plan_generation,
)
from inference.serving.responses.sse import typed_event
from inference.serving.sse import EventStream

log = logging.getLogger(__name__)


@dataclass
class ResponseRun:
    request: ResponseRequest
    ctx: RequestContext
    generation: Generation
    parser: ReplyParser
    shell: ResponseObject  # the response's fields before any output
    input_items: list[dict]
    builder: OutputBuilder = field(default_factory=OutputBuilder)
    reasoning_tokens: int = 0

    def feed(self, text: str) -> None:
        events = self.parser.feed(text)
        # Each delta is a sampled token: one that only reasoned counts as a reasoning token.
        if events and all(isinstance(e, ReasoningDelta) for e in events):
            self.reasoning_tokens += 1
        for event in events:
            self.builder.add(event)

    def finish(self, done: Done) -> ResponseObject:
        for event in self.parser.finish():
            self.builder.add(event)
        complete = done.finish_reason != "length"
        self.builder.finish(complete)
        if complete:
            return self.final("completed")
        return self.final(
            "incomplete", incomplete_details=IncompleteDetails(reason="max_output_tokens")
        )

    def fail(self, error: APIError) -> ResponseObject:
        self.builder.finish(complete=False)
        code = "rate_limit_exceeded" if error.status == 429 else "server_error"
        return self.final("failed", error=ResponseError(code=code, message=error.message))

    def final(self, status: str, **fields) -> ResponseObject:
        return self.shell.model_copy(
            update={
                "status": status,
                "completed_at": now() if status == "completed" else None,
                "output": self.builder.output,
                "usage": self.usage(),
                **fields,
            }
        )

    def usage(self) -> ResponseUsage:
        usage = self.generation.usage()
        return ResponseUsage(
            input_tokens=usage.prompt_tokens,
            input_tokens_details=InputTokensDetails(
                cached_tokens=usage.prompt_tokens_details.cached_tokens
            ),
            output_tokens=usage.completion_tokens,
            output_tokens_details=OutputTokensDetails(reasoning_tokens=self.reasoning_tokens),
            total_tokens=usage.total_tokens,
            truncated_messages=usage.truncated_messages,
        )

    async def keep(self, response: ResponseObject) -> None:
        if self.request.store:
            await store.save(response, self.ctx.caller, self.input_items)


async def answer_response(
    request: ResponseRequest, ctx: RequestContext
) -> ResponseObject | EventStream:
    run = await start_response(request, ctx)
    if request.stream:
        return EventStream(stream_response(run))
    return await complete_response(run)


def echoed_reasoning(reasoning: ReasoningConfig | None) -> ReasoningConfig | None:
    """The reasoning settings as OpenAI echoes them (a summary of "none" is no summary)."""
    if reasoning is None or reasoning.summary in (None, "auto", "concise", "detailed"):
        return reasoning
    return reasoning.model_copy(update={"summary": None})


def response_shell(request: ResponseRequest, plan_params, response_id: str) -> ResponseObject:
    """The parameters a response echoes, as used (temperature after the catalog's default)."""
    return ResponseObject(
        id=response_id,
        created_at=now(),
        status="in_progress",
        model=request.model,
        instructions=request.instructions,
        output=[],
        metadata=request.metadata or {},
        parallel_tool_calls=request.parallel_tool_calls,
        temperature=plan_params.temperature,
        top_p=plan_params.top_p,
        max_output_tokens=request.max_output_tokens,
        tool_choice=request.effective_tool_choice(),
        tools=request.tools or [],
        text=request.text_config(),
        reasoning=echoed_reasoning(request.reasoning),
        previous_response_id=request.previous_response_id,
        store=request.store,
        user=request.user,
    )


async def start_response(request: ResponseRequest, ctx: RequestContext) -> ResponseRun:
    """Resolves the model and the conversation and has the engine admit the job; every
    failure up to here is an HTTP error."""
    resolved = await resolve_model(request.model, ctx.caller)
    conversation = await gather_conversation(request, ctx.caller)
    images = await conversation_images(conversation, resolved)
    plan = plan_generation(request, conversation, resolved, images)
    prompt = resolved.chat_prompt(plan.prompt)
    job = JobRequest(resolved.spec, resolved.adapter, prompt, plan.params)
    generation = await Generation.start(ctx, [job], "resp")
    parser = ReplyParser(resolved.adapter, plan.tool_use, plan.thinking.thinking)
    shell = response_shell(request, plan.params, new_id("resp"))
    namespaced = {f.offered: (f.namespace, f.tool.name) for f in request.functions() if f.namespace}
    return ResponseRun(
        request, ctx, generation, parser, shell, conversation.new_items, OutputBuilder(namespaced)
    )


async def complete_response(run: ResponseRun) -> ResponseObject:
    async for _, event in run.generation.events():
        if isinstance(event, Failed):
            raise api_error(event.error)
        if isinstance(event, Delta):
            run.feed(event.text)
    done = next(iter(run.generation.choices.values())).done
    assert done is not None  # events() ends after the last Done
    response = run.finish(done)
    await run.keep(response)
    return response


def lifecycle(run: ResponseRun, kind: str, response: ResponseObject) -> str:
    event = ResponseLifecycleEvent(
        type=kind, sequence_number=run.builder.number(), response=response
    )
    return typed_event(event)


def outcome_event(response: ResponseObject) -> str:
    return {
        "completed": "response.completed",
        "incomplete": "response.incomplete",
        "failed": "response.failed",
    }[response.status]


async def stream_response(run: ResponseRun) -> AsyncIterator[str]:
    """response.created, response.in_progress, the output's events as the reply grows, then
    response.completed, .incomplete or .failed. A bug midway ends it with an `error` event."""
    try:
        yield lifecycle(run, "response.created", run.shell)
        yield lifecycle(run, "response.in_progress", run.shell)
        async with aclosing(_stream_output(run)) as lines:
            async for line in lines:
                yield line
    except Exception:
        log.exception("response stream %s failed", run.shell.id)
        error = server_error()
        yield typed_event(
            ErrorEvent(
                sequence_number=run.builder.number(),
                code=error.code,
                message=error.message,
                param=None,
            )
        )


async def _stream_output(run: ResponseRun) -> AsyncIterator[str]:
    async for _, event in run.generation.events():
        if isinstance(event, Delta):
            run.feed(event.text)
            for item_event in run.builder.drain():
                yield typed_event(item_event)
            continue
        if isinstance(event, Failed):
            response = run.fail(api_error(event.error))
        else:
            response = run.finish(event)
        for item_event in run.builder.drain():
            yield typed_event(item_event)
        await run.keep(response)
        yield lifecycle(run, outcome_event(response), response)
        return
