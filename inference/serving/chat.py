"""POST /v1/chat/completions: from a validated request to a completion or a chunk stream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field

from inference.engine.client import generate
from inference.engine.types import Delta, Done, Event, Failed, SamplingParams
from inference.protocol.chat import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChunkChoice,
    ChunkDelta,
)
from inference.protocol.errors import APIError
from inference.protocol.usage import Usage
from inference.serving.errors import api_error
from inference.serving.ids import completion_id, now, system_fingerprint
from inference.serving.resolve import ResolvedModel, resolve_model
from inference.serving.sse import DONE, sse_event

UNSUPPORTED_YET = "{} is not supported by this server yet."


def reject_unsupported(request: ChatCompletionRequest) -> None:
    """Refuse what we cannot honour rather than silently ignoring it."""
    if request.n != 1:
        raise APIError(UNSUPPORTED_YET.format("n > 1"), param="n")
    if request.logprobs:
        raise APIError(UNSUPPORTED_YET.format("logprobs"), param="logprobs")
    if request.tools and request.tool_choice != "none":
        raise APIError(UNSUPPORTED_YET.format("Tool calling"), param="tools")
    if request.response_format and request.response_format.type != "text":
        raise APIError(UNSUPPORTED_YET.format("response_format"), param="response_format")


def sampling_params(request: ChatCompletionRequest, resolved: ResolvedModel) -> SamplingParams:
    entry = resolved.entry

    def pick(asked: float | None, default: float | None, fallback: float) -> float:
        return next(v for v in (asked, default, fallback) if v is not None)

    return SamplingParams(
        max_tokens=request.output_limit() or entry.default_max_tokens,
        temperature=pick(request.temperature, entry.default_temperature, 1.0),
        top_p=pick(request.top_p, entry.default_top_p, 1.0),
        top_k=request.top_k or 0,
        min_p=request.min_p or 0.0,
        seed=request.seed,
        presence_penalty=request.presence_penalty or 0.0,
        frequency_penalty=request.frequency_penalty or 0.0,
        repetition_penalty=request.repetition_penalty or 1.0,
        logit_bias={int(k): v for k, v in (request.logit_bias or {}).items()},
        stop=tuple(request.stop or ()),
    )


def chat_messages(request: ChatCompletionRequest, resolved: ResolvedModel) -> list[dict]:
    # Templates know "system", not OpenAI's newer "developer".
    messages = [
        {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
        for m in request.messages
    ]
    system_prompt = resolved.entry.system_prompt
    if system_prompt and not any(m["role"] == "system" for m in messages):
        messages.insert(0, {"role": "system", "content": system_prompt})
    return messages


@dataclass
class ChatRun:
    """One request's generation, started, with its first event already in hand."""

    request: ChatCompletionRequest
    events: AsyncIterator[Event]
    first: Event
    id: str = field(default_factory=completion_id)
    created: int = field(default_factory=now)


async def start_chat(request: ChatCompletionRequest) -> ChatRun:
    """Starts generation and waits for its first event, so early failures are HTTP errors."""
    reject_unsupported(request)
    resolved = await resolve_model(request.model)
    events = generate(
        resolved.spec,
        resolved.adapter,
        chat_messages(request, resolved),
        sampling_params(request, resolved),
    )
    try:
        first = await anext(events)
    except BaseException:
        await events.aclose()
        raise
    if isinstance(first, Failed):
        await events.aclose()
        raise api_error(first.error)
    return ChatRun(request, events, first)


async def run_events(run: ChatRun) -> AsyncIterator[Event]:
    yield run.first
    async with aclosing(run.events) as rest:
        async for event in rest:
            yield event


async def complete_chat(run: ChatRun) -> ChatCompletion:
    parts: list[str] = []
    async with aclosing(run_events(run)) as events:
        async for event in events:
            if isinstance(event, Delta):
                parts.append(event.text)
            elif isinstance(event, Failed):
                raise api_error(event.error)
            else:
                done = event
    return ChatCompletion(
        id=run.id,
        created=run.created,
        model=run.request.model,
        system_fingerprint=system_fingerprint(),
        choices=[
            ChatChoice(
                index=0,
                message=AssistantMessage(content="".join(parts)),
                finish_reason=done.finish_reason,
            )
        ],
        usage=usage_of(done),
    )


def usage_of(done: Done) -> Usage:
    return Usage(
        prompt_tokens=done.prompt_tokens,
        completion_tokens=done.completion_tokens,
        total_tokens=done.prompt_tokens + done.completion_tokens,
    )


async def stream_chat(run: ChatRun) -> AsyncIterator[str]:
    """SSE lines: a role chunk, content chunks, a finish chunk, optional usage, [DONE]."""
    include_usage = bool(run.request.stream_options and run.request.stream_options.include_usage)

    def chunk(choices: list[ChunkChoice], usage: Usage | None = None) -> str:
        payload = ChatCompletionChunk(
            id=run.id,
            created=run.created,
            model=run.request.model,
            system_fingerprint=system_fingerprint(),
            choices=choices,
            usage=usage,
        )
        # With include_usage every chunk says "usage": null but the last; without, no key.
        return sse_event(payload, exclude=None if include_usage else {"usage"})

    def choice(delta: ChunkDelta, finish_reason: str | None = None) -> ChunkChoice:
        return ChunkChoice(index=0, delta=delta, logprobs=None, finish_reason=finish_reason)

    yield chunk([choice(ChunkDelta(role="assistant", content=""))])
    async with aclosing(run_events(run)) as events:
        async for event in events:
            if isinstance(event, Delta):
                yield chunk([choice(ChunkDelta(content=event.text))])
            elif isinstance(event, Failed):
                yield sse_event(api_error(event.error).body())
                break
            else:
                yield chunk([choice(ChunkDelta(), event.finish_reason)])
                if include_usage:
                    yield chunk([], usage_of(event))
    yield DONE
