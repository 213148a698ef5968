"""/api/chat and /api/generate replies: one object per piece of text (thinking, content, or a
whole tool call: Ollama sends a call's arguments as an object, so a call goes out once the
model has written it), then a last one with done: true, why it stopped and its timings; or the
whole answer as that last object."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from inference.engine.types import Delta, Done
from inference.protocol.ollama.responses import (
    AssistantMessage,
    ChatResponse,
    GenerateResponse,
    Timings,
    ToolCall,
    ToolCallFunction,
)
from inference.serving.generation import Choice
from inference.serving.reply import (
    ParsedToolCall,
    ReasoningDelta,
    ReplyEvent,
    TextDelta,
    ToolCallEnd,
    parse_reply,
)
from inference.serving.sse import Wire
from inference.serving.tooluse import arguments_object
from inference.serving.writer import ReplyWriter, Run


def created_at() -> str:
    """RFC 3339 with nanoseconds' precision where Go has it; microseconds here."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _ns(seconds: float) -> int:
    return max(0, int(seconds * 1e9))


def tool_calls(calls: list[ParsedToolCall], first: int = 0) -> list[ToolCall] | None:
    return [
        ToolCall(
            id=call.id,
            function=ToolCallFunction(
                index=first + i,
                name=call.name,
                arguments=arguments_object(call.arguments, partial=False),
            ),
        )
        for i, call in enumerate(calls)
    ] or None


class OllamaWriter(ReplyWriter):
    """What both endpoints share: the parser, the clock, the last object's fields. A subclass
    says how a piece is written (`piece`)."""

    def __init__(self, run: Run) -> None:
        super().__init__(run)
        self.name: str = run.body.name  # type: ignore[attr-defined]
        self.parser = run.parser()
        self.admitted = time.monotonic()
        self.first_token: float | None = None
        self.calls = 0

    def piece(self, text: str, thinking: str | None, calls: list[ToolCall] | None, **final) -> Wire:
        raise NotImplementedError

    def timings(self, done: Done) -> dict:
        now = time.monotonic()
        first = self.first_token or now
        usage = self.run.generation.usage()
        return Timings(
            total_duration=_ns(now - self.run.ctx.started),
            load_duration=0,  # a model read for this request counts in prompt_eval_duration
            prompt_eval_count=usage.prompt,
            prompt_eval_duration=_ns(first - self.admitted),
            eval_count=done.completion_tokens,
            eval_duration=_ns(now - first),
        ).model_dump()

    def pieces(self, events: list[ReplyEvent]) -> list[Wire]:
        thinking = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        ended = [
            ParsedToolCall(e.id, e.name, e.arguments) for e in events if isinstance(e, ToolCallEnd)
        ]
        calls = tool_calls(ended, self.calls)
        self.calls += len(ended)
        if not (thinking or text or calls):
            return []
        return [self.piece(text, thinking or None, calls)]

    def feed(self, choice: Choice, event: Delta | Done) -> list[Wire]:
        if isinstance(event, Delta):
            if self.first_token is None:
                self.first_token = time.monotonic()
            return self.pieces(self.parser.feed(event.text))
        out = self.pieces(self.parser.finish())
        last = self.piece("", None, None, done_reason=event.finish_reason, **self.timings(event))
        return [*out, last]

    async def response(self) -> Wire:
        run = self.run
        choice = run.generation.choices[0]
        reply = parse_reply(run.resolved.adapter, choice.text, run.plan.tool_use, run.thinking)
        assert choice.done is not None
        if self.first_token is None:  # not streamed: the reading and the writing timed as one
            self.first_token = self.admitted
        return self.piece(
            reply.content or "",
            reply.reasoning,
            tool_calls(reply.tool_calls),
            done_reason=choice.done.finish_reason,
            **self.timings(choice.done),
        )


class OllamaChatWriter(OllamaWriter):
    def piece(
        self, text: str, thinking: str | None, calls: list[ToolCall] | None, **final
    ) -> ChatResponse:
        message = AssistantMessage(content=text, thinking=thinking, tool_calls=calls)
        done = "done_reason" in final
        return ChatResponse(
            model=self.name, created_at=created_at(), message=message, done=done, **final
        )


class OllamaGenerateWriter(OllamaWriter):
    def piece(
        self, text: str, thinking: str | None, calls: list[ToolCall] | None, **final
    ) -> GenerateResponse:
        done = "done_reason" in final
        return GenerateResponse(
            model=self.name,
            created_at=created_at(),
            response=text,
            thinking=thinking,
            done=done,
            **final,
        )
