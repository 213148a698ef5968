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
    FunctionCall,
    FunctionCallDelta,
    NamedToolChoice,
    TextPart,
    ToolCall,
    ToolCallDelta,
)
from inference.protocol.openai.common import ChoiceLogprobs, TokenLogprob, TopLogprob
from inference.protocol.openai.errors import error_body
from inference.serving.context import RequestContext
from inference.serving.errors import api_error
from inference.serving.generation import Choice, Generation
from inference.serving.images import ImageSource, load_images, template_content
from inference.serving.reply import (
    ReasoningDelta,
    Reply,
    ReplyEvent,
    ReplyParser,
    TextDelta,
    ToolArgumentsDelta,
    ToolCallStart,
    parse_reply,
)
from inference.serving.resolve import ResolvedModel, resolve_model
from inference.serving.sampling import per_choice, sampling_params
from inference.serving.sse import DONE, EventStream, chunk_writer, sse_event
from inference.serving.structured import response_format_grammar
from inference.serving.thinking import Thinking, plan_thinking
from inference.serving.tooluse import FunctionTool, ToolUse


def content_of(message: ChatMessage) -> str | list[dict]:
    """Text, or with images a content list: text parts and {"type": "image"} placeholders."""
    if not message.image_parts():
        return message.text()
    parts = message.content or []
    return template_content([p.text if isinstance(p, TextPart) else None for p in parts])


def image_sources(messages: list[ChatMessage]) -> list[ImageSource]:
    return [
        ImageSource(f"messages.{i}.content.{j}", url=part.image_url.url)
        for i, message in enumerate(messages)
        for j, part in message.image_parts()
    ]


def message_dict(message: ChatMessage) -> dict:
    # Templates know "system", not OpenAI's newer "developer".
    role = "system" if message.role == "developer" else message.role
    out: dict = {"role": role, "content": content_of(message)}
    if message.tool_calls:
        out["tool_calls"] = [call.model_dump() for call in message.tool_calls]
    if message.tool_call_id:
        out["tool_call_id"] = message.tool_call_id
    # Templates decide whether earlier thinking shows (most drop it before the last user turn).
    reasoning = message.reasoning_content or message.reasoning
    if message.role == "assistant" and reasoning:
        out["reasoning_content"] = reasoning
    return out


def chat_tool_use(request: ChatCompletionRequest) -> ToolUse:
    tools = tuple(
        FunctionTool(t.function.name, t.function.description, t.function.parameters)
        for t in request.tools or []
    )
    choice = request.effective_tool_choice()
    if isinstance(choice, NamedToolChoice):
        return ToolUse(tools, forced=choice.function.name, parallel=request.parallel_tool_calls)
    asked = "parallel_tool_calls" in request.model_fields_set
    return ToolUse(tools, choice, parallel=request.parallel_tool_calls, parallel_asked=asked)  # type: ignore[arg-type]


def thinking_asked(request: ChatCompletionRequest, switch: str) -> bool | None:
    """The template's own switch in chat_template_kwargs wins; then reasoning_effort."""
    kwargs = request.chat_template_kwargs or {}
    if switch and switch in kwargs:
        return bool(kwargs[switch])
    if request.reasoning_effort is None:
        return None
    return request.reasoning_effort != "none"


@dataclass
class ChatRun:
    request: ChatCompletionRequest
    resolved: ResolvedModel
    generation: Generation
    tool_use: ToolUse
    thinking: Thinking | None

    def parser(self) -> ReplyParser:
        return ReplyParser(self.resolved.adapter, self.tool_use, self.thinking)


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
    images = await load_images(
        image_sources(request.messages), resolved.spec.model_id, resolved.spec.vision
    )
    tool_use = chat_tool_use(request)
    adapter = resolved.adapter
    grammar = tool_use.grammar(adapter.tool_syntax()) or response_format_grammar(
        request.response_format
    )
    plan = plan_thinking(
        adapter,
        thinking_asked(request, adapter.profile.thinking_switch),
        constrained=grammar is not None,
        effort=request.reasoning_effort,
    )
    params = sampling_params(
        request,
        resolved.entry,
        max_tokens=request.output_limit(),
        logprobs=request.logprobs,
        top_logprobs=request.top_logprobs or 0,
        grammar=grammar,
    )
    messages = [message_dict(m) for m in request.messages]
    system_prompt = resolved.entry.system_prompt
    if system_prompt and not any(m["role"] == "system" for m in messages):
        messages.insert(0, {"role": "system", "content": system_prompt})
    kwargs = {**(request.chat_template_kwargs or {}), **plan.template_kwargs}
    prompt = resolved.chat_prompt(
        ChatPrompt(messages, tool_use.template_tools(), kwargs or None, images=images)
    )
    jobs = [
        JobRequest(resolved.spec, adapter, prompt, choice_params)
        for choice_params in per_choice(params, request.n)
    ]
    generation = await Generation.start(ctx, jobs, "chatcmpl", request.n)
    return ChatRun(request, resolved, generation, tool_use, plan.thinking)


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


def finish_reason(choice: Choice, reply: Reply) -> str:
    if reply.tool_calls and choice.done.finish_reason == "stop":
        return "tool_calls"
    return choice.done.finish_reason


def assistant_message(reply: Reply) -> AssistantMessage:
    calls = [
        ToolCall(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments))
        for c in reply.tool_calls
    ]
    content = reply.content if reply.content is not None or calls else ""
    return AssistantMessage(
        content=content,
        tool_calls=calls or None,
        reasoning_content=reply.reasoning,
        reasoning=reply.reasoning,
    )


async def complete_chat(run: ChatRun) -> ChatCompletion:
    await run.generation.finish()
    choices = []
    for choice in run.generation.choices.values():
        reply = parse_reply(run.resolved.adapter, choice.text, run.tool_use, run.thinking)
        choices.append(
            ChatChoice(
                index=choice.index,
                message=assistant_message(reply),
                logprobs=wire_logprobs(choice.logprobs) if run.request.logprobs else None,
                finish_reason=finish_reason(choice, reply),
            )
        )
    return ChatCompletion(
        **run.generation.envelope(run.request.model),
        choices=choices,
        usage=run.generation.usage(),
    )


def chunk_delta(events: list[ReplyEvent]) -> ChunkDelta | None:
    """One delta for what a piece of text said: thinking, content and tool-call pieces."""
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    content = "".join(e.text for e in events if isinstance(e, TextDelta))
    calls: dict[int, ToolCallDelta] = {}
    for event in events:
        if isinstance(event, ToolCallStart):
            function = FunctionCallDelta(name=event.name, arguments="")
            calls[event.index] = ToolCallDelta(
                index=event.index, id=event.id, type="function", function=function
            )
        elif isinstance(event, ToolArgumentsDelta):
            delta = calls.setdefault(
                event.index, ToolCallDelta(index=event.index, function=FunctionCallDelta())
            )
            function = delta.function or FunctionCallDelta()
            function.arguments = (function.arguments or "") + event.text
    if not (reasoning or content or calls):
        return None
    return ChunkDelta(
        content=content or None,
        reasoning_content=reasoning or None,
        reasoning=reasoning or None,
        tool_calls=list(calls.values()) or None,
    )


async def stream_chat(run: ChatRun) -> AsyncIterator[str]:
    """SSE lines: role chunks, content chunks, finish chunks, optional usage, [DONE]."""
    request, generation = run.request, run.generation
    include_usage = request.include_usage()
    chunk = chunk_writer(ChatCompletionChunk, generation.envelope(request.model), include_usage)

    parsers = {i: run.parser() for i in generation.choices}
    for index in generation.choices:
        yield chunk([ChunkChoice(index=index, delta=ChunkDelta(role="assistant", content=""))])
    async for choice, event in generation.events():
        if isinstance(event, Failed):
            yield sse_event(error_body(api_error(event.error)))
            break
        parser = parsers[choice.index]
        if isinstance(event, Delta):
            delta = chunk_delta(parser.feed(event.text))
            logprobs = wire_logprobs(event.logprobs) if request.logprobs else None
            if delta or logprobs:
                yield chunk(
                    [
                        ChunkChoice(
                            index=choice.index, delta=delta or ChunkDelta(), logprobs=logprobs
                        )
                    ]
                )
            continue
        if delta := chunk_delta(parser.finish()):
            yield chunk([ChunkChoice(index=choice.index, delta=delta)])
        finish = finish_reason(choice, parser.reply())
        yield chunk([ChunkChoice(index=choice.index, delta=ChunkDelta(), finish_reason=finish)])
    else:
        if include_usage:
            yield chunk([], generation.usage())
    yield DONE
