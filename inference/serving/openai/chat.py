"""POST /v1/chat/completions: the request's plan, and its completion or chunk stream."""

from __future__ import annotations

from inference.engine.types import Delta, Done, SampledToken
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
    ResponseFormatJSONObject,
    ResponseFormatJSONSchema,
    TextPart,
    ToolCall,
    ToolCallDelta,
)
from inference.protocol.openai.common import ChoiceLogprobs, TokenLogprob, TopLogprob
from inference.serving.context import RequestContext
from inference.serving.generation import Choice
from inference.serving.images import ImageSource, template_content
from inference.serving.openai.envelopes import chunk_writer, envelope
from inference.serving.openai.sampling import sampling_ask
from inference.serving.openai.usage import openai_usage
from inference.serving.plan import JSONFormat, Plan, ThinkingAsk
from inference.serving.reply import (
    ReasoningDelta,
    Reply,
    ReplyEvent,
    TextDelta,
    ToolArgumentsDelta,
    ToolCallStart,
    parse_reply,
)
from inference.serving.resolve import ResolvedModel
from inference.serving.sse import Wire
from inference.serving.structured import ANY_OBJECT
from inference.serving.tooluse import FunctionTool, ToolUse
from inference.serving.writer import ReplyWriter, Run


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


def json_format(response_format: object) -> JSONFormat | None:
    if isinstance(response_format, ResponseFormatJSONObject):
        return JSONFormat(ANY_OBJECT, "response_format")
    if isinstance(response_format, ResponseFormatJSONSchema):
        schema = response_format.json_schema.schema_ or ANY_OBJECT
        return JSONFormat(schema, "response_format.json_schema.schema")
    return None


async def plan_chat(
    request: ChatCompletionRequest, resolved: ResolvedModel, ctx: RequestContext
) -> Plan:
    """The plan builder: a chat request in the neutral plan's words."""
    switch = resolved.adapter.profile.thinking_switch
    return Plan(
        messages=[message_dict(m) for m in request.messages],
        sampling=sampling_ask(
            request,
            max_tokens=request.output_limit(),
            logprobs=request.logprobs,
            top_logprobs=request.top_logprobs or 0,
        ),
        tool_use=chat_tool_use(request),
        json_format=json_format(request.response_format),
        thinking=ThinkingAsk(thinking_asked(request, switch), effort=request.reasoning_effort),
        template_kwargs=dict(request.chat_template_kwargs or {}),
        images=tuple(image_sources(request.messages)),
        n=request.n,
    )


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


class ChatWriter(ReplyWriter):
    """The reply writer: role chunks, content chunks, finish chunks, optional usage (the
    pipeline sends [DONE] after them); or the whole completion."""

    def __init__(self, run: Run) -> None:
        super().__init__(run)
        self.request: ChatCompletionRequest = run.body  # type: ignore[assignment]
        self.chunk = chunk_writer(ChatCompletionChunk, run, self.request.include_usage())
        self.parsers = {i: run.parser() for i in run.generation.choices}

    def opening(self) -> list[Wire]:
        role = ChunkDelta(role="assistant", content="")
        return [self.chunk([ChunkChoice(index=i, delta=role)]) for i in self.parsers]

    def feed(self, choice: Choice, event: Delta | Done) -> list[Wire]:
        parser = self.parsers[choice.index]
        if isinstance(event, Delta):
            delta = chunk_delta(parser.feed(event.text))
            logprobs = wire_logprobs(event.logprobs) if self.request.logprobs else None
            if not (delta or logprobs):
                return []
            piece = ChunkChoice(index=choice.index, delta=delta or ChunkDelta(), logprobs=logprobs)
            return [self.chunk([piece])]
        out = []
        if delta := chunk_delta(parser.finish()):
            out.append(self.chunk([ChunkChoice(index=choice.index, delta=delta)]))
        finish = finish_reason(choice, parser.reply())
        last = ChunkChoice(index=choice.index, delta=ChunkDelta(), finish_reason=finish)
        return [*out, self.chunk([last])]

    async def closing(self) -> list[Wire]:
        if not self.request.include_usage():
            return []
        return [self.chunk([], openai_usage(self.run.generation.usage()))]

    async def response(self) -> ChatCompletion:
        run = self.run
        choices = []
        for choice in run.generation.choices.values():
            reply = parse_reply(run.resolved.adapter, choice.text, run.plan.tool_use, run.thinking)
            logprobs = wire_logprobs(choice.logprobs) if self.request.logprobs else None
            choices.append(
                ChatChoice(
                    index=choice.index,
                    message=assistant_message(reply),
                    logprobs=logprobs,
                    finish_reason=finish_reason(choice, reply),
                )
            )
        usage = openai_usage(run.generation.usage())
        return ChatCompletion(**envelope(run), choices=choices, usage=usage)
