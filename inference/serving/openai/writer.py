"""OpenAI's reply writers: a chat completion or its chunk stream, and a legacy completion or
its chunk stream, from the engine's events."""

from __future__ import annotations

from inference.engine.types import Delta, Done, SampledToken
from inference.protocol.openai.chat import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChunkChoice,
    ChunkDelta,
    FunctionCall,
    FunctionCallDelta,
    ToolCall,
    ToolCallDelta,
)
from inference.protocol.openai.common import (
    ChoiceLogprobs,
    LegacyLogprobs,
    TokenLogprob,
    TopLogprob,
)
from inference.protocol.openai.completions import Completion, CompletionChoice, CompletionRequest
from inference.serving.generation import Choice
from inference.serving.openai.envelopes import chunk_writer, envelope
from inference.serving.openai.usage import openai_usage
from inference.serving.prompts import Asked, TextPrompt
from inference.serving.reply import (
    ReasoningDelta,
    Reply,
    ReplyEvent,
    TextDelta,
    ToolArgumentsDelta,
    ToolCallStart,
    parse_reply,
)
from inference.serving.sse import Wire
from inference.serving.writer import ReplyWriter, Run


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


class ChatCompletionWriter(ReplyWriter):
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


class CompletionWriter(ReplyWriter):
    """The reply writer: echoed prompts, text chunks, finish chunks, optional usage; or the
    whole completion."""

    def __init__(self, run: Run) -> None:
        super().__init__(run)
        self.request: CompletionRequest = run.body  # type: ignore[assignment]
        self.chunk = chunk_writer(Completion, run, self.request.include_usage())
        # Where each choice's next token starts in its text (echo included), for text_offset.
        self.offsets: dict[int, int] = {}

    def prompt_of(self, choice: Choice) -> Asked:
        return self.run.plan.raw_prompts[choice.index // self.request.n]

    def echo_text(self, choice: Choice) -> str:
        if not self.request.echo:
            return ""
        prompt = self.prompt_of(choice)
        return prompt.text if isinstance(prompt, TextPrompt) else choice.started.prompt_text or ""

    def logprobs(
        self, choice: Choice, entries: tuple[SampledToken, ...] | list[SampledToken]
    ) -> LegacyLogprobs | None:
        if self.request.logprobs is None:
            return None
        offset = self.offsets.setdefault(choice.index, len(self.echo_text(choice)))
        offsets = []
        for entry in entries:
            offsets.append(offset)
            offset += len(entry.token)
        self.offsets[choice.index] = offset
        return LegacyLogprobs(
            tokens=[e.token for e in entries],
            token_logprobs=[e.logprob for e in entries],
            top_logprobs=[{t.token: t.logprob for t in e.top} for e in entries],
            text_offset=offsets,
        )

    def _text(self, choice: Choice, text: str, logprobs=None, finish=None) -> Wire:
        piece = CompletionChoice(
            index=choice.index, text=text, logprobs=logprobs, finish_reason=finish
        )
        return self.chunk([piece])

    def opening(self) -> list[Wire]:
        choices = self.run.generation.choices.values()
        return [self._text(c, echo) for c in choices if (echo := self.echo_text(c))]

    def feed(self, choice: Choice, event: Delta | Done) -> list[Wire]:
        if isinstance(event, Delta):
            return [self._text(choice, event.text, self.logprobs(choice, event.logprobs))]
        return [self._text(choice, "", finish=event.finish_reason)]

    async def closing(self) -> list[Wire]:
        if not self.request.include_usage():
            return []
        return [self.chunk([], openai_usage(self.run.generation.usage()))]

    async def response(self) -> Completion:
        choices = [
            CompletionChoice(
                index=choice.index,
                text=self.echo_text(choice) + choice.text,
                logprobs=self.logprobs(choice, choice.logprobs),
                finish_reason=choice.done.finish_reason,
            )
            for choice in self.run.generation.choices.values()
        ]
        usage = openai_usage(self.run.generation.usage())
        return Completion(**envelope(self.run), choices=choices, usage=usage)
