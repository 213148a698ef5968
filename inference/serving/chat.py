"""POST /v1/chat/completions: from a validated request to a completion or a chunk stream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from django.conf import settings

from inference.engine.types import ChatPrompt, Delta, Failed, JobRequest, SampledToken
from inference.protocol.errors import APIError
from inference.protocol.openai.chat import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatMessage,
    ChunkChoice,
    ChunkDelta,
    FunctionCallDelta,
    ToolCall,
    ToolCallDelta,
)
from inference.protocol.openai.common import ChoiceLogprobs, TokenLogprob, TopLogprob
from inference.protocol.openai.errors import error_body
from inference.serving.context import RequestContext
from inference.serving.errors import api_error
from inference.serving.generation import Choice, Generation
from inference.serving.resolve import ResolvedModel, resolve_model
from inference.serving.sampling import per_choice, sampling_params
from inference.serving.sse import DONE, EventStream, chunk_writer, sse_event
from inference.serving.structured import chat_grammar
from inference.serving.tool_calls import StreamedReply, split_reply


def message_dict(message: ChatMessage) -> dict:
    # Templates know "system", not OpenAI's newer "developer".
    role = "system" if message.role == "developer" else message.role
    out: dict = {"role": role, "content": message.text()}
    if message.tool_calls:
        out["tool_calls"] = [call.model_dump() for call in message.tool_calls]
    if message.tool_call_id:
        out["tool_call_id"] = message.tool_call_id
    return out


def chat_prompt(request: ChatCompletionRequest, resolved: ResolvedModel) -> ChatPrompt:
    messages = [message_dict(m) for m in request.messages]
    system_prompt = resolved.entry.system_prompt
    if system_prompt and not any(m["role"] == "system" for m in messages):
        messages.insert(0, {"role": "system", "content": system_prompt})
    tools = None
    if request.effective_tool_choice() != "none":
        tools = [tool.model_dump(exclude_none=True) for tool in request.tools or []]
    return ChatPrompt(messages, tools)


@dataclass
class ChatRun:
    request: ChatCompletionRequest
    resolved: ResolvedModel
    generation: Generation


async def answer_chat(
    request: ChatCompletionRequest, ctx: RequestContext
) -> ChatCompletion | EventStream:
    run = await start_chat(request, ctx)
    if request.stream:
        return EventStream(stream_chat(run))
    return await complete_chat(run)


async def start_chat(request: ChatCompletionRequest, ctx: RequestContext) -> ChatRun:
    """Resolves the model and has the engine admit every choice; early failures raise."""
    if len(request.messages) > settings.MAX_MESSAGES:
        raise APIError(
            f"Too many messages: {len(request.messages)}; this server takes at most "
            f"{settings.MAX_MESSAGES}.",
            param="messages",
            code="too_many_messages",
        )
    resolved = await resolve_model(request.model, ctx.caller)
    params = sampling_params(
        request,
        resolved.entry,
        max_tokens=request.output_limit(),
        logprobs=request.logprobs,
        top_logprobs=request.top_logprobs or 0,
        grammar=chat_grammar(request),
    )
    prompt = chat_prompt(request, resolved)
    jobs = [
        JobRequest(resolved.spec, resolved.adapter, prompt, choice_params)
        for choice_params in per_choice(params, request.n)
    ]
    return ChatRun(request, resolved, await Generation.start(ctx, jobs, "chatcmpl", request.n))


def wire_logprobs(entries: list[SampledToken] | tuple[SampledToken, ...]) -> ChoiceLogprobs:
    return ChoiceLogprobs(
        content=[
            TokenLogprob(
                token=e.token,
                logprob=e.logprob,
                bytes=list(e.bytes),
                top_logprobs=[
                    TopLogprob(token=t.token, logprob=t.logprob, bytes=list(t.bytes)) for t in e.top
                ],
            )
            for e in entries
        ]
    )


def finish_reason(choice: Choice, tool_calls: list[ToolCall]) -> str:
    return "tool_calls" if tool_calls else choice.done.finish_reason


async def complete_chat(run: ChatRun) -> ChatCompletion:
    await run.generation.finish()
    choices = []
    for choice in run.generation.choices.values():
        reply = split_reply(run.request, run.resolved.adapter, choice.text)
        choices.append(
            ChatChoice(
                index=choice.index,
                message=AssistantMessage(
                    content=reply.content, tool_calls=reply.tool_calls or None
                ),
                logprobs=wire_logprobs(choice.logprobs) if run.request.logprobs else None,
                finish_reason=finish_reason(choice, reply.tool_calls),
            )
        )
    return ChatCompletion(
        **run.generation.envelope(run.request.model),
        choices=choices,
        usage=run.generation.usage(),
    )


def tool_call_deltas(calls: list[ToolCall]) -> list[ToolCallDelta]:
    return [
        ToolCallDelta(
            index=i,
            id=call.id,
            type="function",
            function=FunctionCallDelta(name=call.function.name, arguments=call.function.arguments),
        )
        for i, call in enumerate(calls)
    ]


async def stream_chat(run: ChatRun) -> AsyncIterator[str]:
    """SSE lines: role chunks, content chunks, finish chunks, optional usage, [DONE]."""
    request, generation = run.request, run.generation
    include_usage = request.include_usage()
    chunk = chunk_writer(ChatCompletionChunk, generation.envelope(request.model), include_usage)

    replies = {i: StreamedReply(request, run.resolved.adapter) for i in generation.choices}
    for index in generation.choices:
        yield chunk([ChunkChoice(index=index, delta=ChunkDelta(role="assistant", content=""))])
    async for choice, event in generation.events():
        if isinstance(event, Failed):
            yield sse_event(error_body(api_error(event.error)))
            break
        reply = replies[choice.index]
        if isinstance(event, Delta):
            content = reply.feed(event.text)
            logprobs = wire_logprobs(event.logprobs) if request.logprobs else None
            if content or logprobs:
                delta = ChunkDelta(content=content) if content else ChunkDelta()
                yield chunk([ChunkChoice(index=choice.index, delta=delta, logprobs=logprobs)])
            continue
        content, calls = reply.finish()
        if content:
            yield chunk([ChunkChoice(index=choice.index, delta=ChunkDelta(content=content))])
        if calls:
            delta = ChunkDelta(tool_calls=tool_call_deltas(calls))
            yield chunk([ChunkChoice(index=choice.index, delta=delta)])
        finish = finish_reason(choice, calls)
        yield chunk([ChunkChoice(index=choice.index, delta=ChunkDelta(), finish_reason=finish)])
    else:
        if include_usage:
            yield chunk([], generation.usage())
    yield DONE
