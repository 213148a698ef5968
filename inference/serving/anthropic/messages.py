"""POST /v1/messages (a whole message or its stream) and /v1/messages/count_tokens."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from django.conf import settings

from catalog.models import CatalogModel
from inference.adapters import FamilyAdapter
from inference.engine.types import Delta, EngineError, Failed, JobRequest, SamplingParams
from inference.protocol.anthropic.errors import error_body
from inference.protocol.anthropic.events import (
    MessageDelta,
    MessageStart,
    MessageStop,
    OutputUsage,
    Ping,
    StopDelta,
    sse,
)
from inference.protocol.anthropic.requests import (
    CountTokensRequest,
    MessagesInput,
    MessagesRequest,
)
from inference.protocol.anthropic.responses import MessageResponse, MessageUsage, TokenCount
from inference.protocol.openai.common import SamplingFields
from inference.serving.anthropic.blocks import BlockStream, content_blocks, stop_reason
from inference.serving.anthropic.prompt import PromptPlan, image_sources, plan_prompt
from inference.serving.context import RequestContext
from inference.serving.drain import drain
from inference.serving.errors import api_error
from inference.serving.generation import SHUTTING_DOWN, TIMEOUT, Choice, Generation
from inference.serving.images import load_images
from inference.serving.prepare import count_prompt_tokens
from inference.serving.reply import ReplyParser, parse_reply
from inference.serving.resolve import ResolvedModel, resolve_model
from inference.serving.sampling import sampling_params
from inference.serving.sse import EventStream


def sampling(request: MessagesRequest, entry: CatalogModel, grammar: str | None) -> SamplingParams:
    """The catalog's defaults fill what the request leaves out, as for chat. max_tokens past
    the model's limit is cut to it (clients such as Claude Code ask for tens of thousands), and
    a reply cut there stops with max_tokens."""
    limit = entry.max_output_tokens
    fields = SamplingFields(
        model=request.model,
        temperature=request.temperature,
        top_p=request.top_p,
        top_k=request.top_k,
    )
    max_tokens = min(request.max_tokens, limit) if limit else request.max_tokens
    params = sampling_params(fields, entry, max_tokens=max_tokens, grammar=grammar)
    # Anthropic takes up to 16 stop sequences (chat's field stops at 4): set them directly.
    return replace(params, stop=tuple(request.stop_sequences or ()))


@dataclass
class MessageRun:
    request: MessagesRequest
    plan: PromptPlan
    adapter: FamilyAdapter
    generation: Generation

    @property
    def id(self) -> str:
        return self.generation.id.replace("msg-", "msg_", 1)

    @property
    def choice(self) -> Choice:
        return self.generation.choices[0]

    def usage(self, output_tokens: int = 0) -> MessageUsage:
        # Anthropic counts cache reads apart: input + cache_read is the whole prompt.
        started = self.choice.started
        return MessageUsage(
            input_tokens=started.prompt_tokens - started.cached_tokens,
            output_tokens=output_tokens,
            cache_read_input_tokens=started.cached_tokens,
            truncated_messages=started.truncated_messages or None,
        )


async def request_images(request: MessagesInput, resolved: ResolvedModel) -> tuple:
    sources = image_sources(request)
    return await load_images(sources, resolved.spec.model_id, resolved.spec.vision)


async def answer_messages(
    request: MessagesRequest, ctx: RequestContext
) -> MessageResponse | EventStream:
    resolved = await resolve_model(request.model, ctx.caller)
    plan = plan_prompt(request, resolved, await request_images(request, resolved))
    params = sampling(request, resolved.entry, plan.grammar)
    job = JobRequest(resolved.spec, resolved.adapter, resolved.chat_prompt(plan.prompt), params)
    generation = await Generation.start(ctx, [job], "msg")
    run = MessageRun(request, plan, resolved.adapter, generation)
    if request.stream:
        return EventStream(stream_message(run))
    return await complete_message(run)


async def complete_message(run: MessageRun) -> MessageResponse:
    await run.generation.finish()
    choice = run.choice
    reply = parse_reply(run.adapter, choice.text, run.plan.tool_use, run.plan.thinking)
    reason, sequence = stop_reason(
        choice.done, bool(reply.tool_calls), run.request.stop_sequences or []
    )
    return MessageResponse(
        id=run.id,
        model=run.request.model,
        content=content_blocks(reply),
        stop_reason=reason,
        stop_sequence=sequence,
        usage=run.usage(choice.done.completion_tokens),
    )


async def stream_message(run: MessageRun) -> AsyncIterator[str]:
    """message_start, ping, the content blocks' events, message_delta, message_stop; a
    failure midway ends the stream with an error event."""
    start = MessageResponse(
        id=run.id, model=run.request.model, content=[], stop_reason=None, usage=run.usage()
    )
    yield sse(MessageStart(message=start))
    yield sse(Ping())
    parser = ReplyParser(run.adapter, run.plan.tool_use, run.plan.thinking)
    blocks = BlockStream()
    async for _, event in run.generation.events():
        if isinstance(event, Failed):
            yield sse(error_body(api_error(event.error)))
            return
        events = parser.feed(event.text) if isinstance(event, Delta) else parser.finish()
        for block_event in blocks.feed(events):
            yield sse(block_event)
        if isinstance(event, Delta):
            continue
        for block_event in blocks.close():
            yield sse(block_event)
        reason, sequence = stop_reason(
            event, blocks.tool_calls > 0, run.request.stop_sequences or []
        )
        yield sse(
            MessageDelta(
                delta=StopDelta(stop_reason=reason, stop_sequence=sequence),
                usage=OutputUsage(output_tokens=event.completion_tokens),
            )
        )
    yield sse(MessageStop())


async def count_message_tokens(request: CountTokensRequest, ctx: RequestContext) -> TokenCount:
    """The prompt create would read for the same body, counted on the engine (tools, system
    and prefill included): its input_tokens plus cache_read_input_tokens. Under the model's
    truncate_middle policy, what is left after old turns are dropped (leaving room for a
    quarter of the context: count_tokens has no max_tokens)."""
    if drain.draining:
        raise api_error(SHUTTING_DOWN)
    resolved = await resolve_model(request.model, ctx.caller)
    plan = plan_prompt(request, resolved, await request_images(request, resolved))
    prompt = resolved.chat_prompt(plan.prompt)
    job = JobRequest(resolved.spec, resolved.adapter, prompt, SamplingParams())
    if ctx.record is not None:
        ctx.record.model = resolved.spec.model_id
    try:
        async with asyncio.timeout(settings.REQUEST_TIMEOUT):
            return TokenCount(input_tokens=await count_prompt_tokens(ctx, job))
    except EngineError as exc:
        raise api_error(exc) from None
    except TimeoutError:
        raise api_error(TIMEOUT) from None
