"""Anthropic's reply writer for POST /v1/messages: a whole message, or its stream events."""

from __future__ import annotations

from inference.engine.types import Delta, Done
from inference.protocol.anthropic.events import (
    MessageDelta,
    MessageStart,
    MessageStop,
    OutputUsage,
    Ping,
    StopDelta,
)
from inference.protocol.anthropic.requests import MessagesRequest
from inference.protocol.anthropic.responses import MessageResponse, MessageUsage
from inference.serving.anthropic.blocks import BlockStream, content_blocks, stop_reason
from inference.serving.generation import Choice
from inference.serving.reply import parse_reply
from inference.serving.sse import Wire
from inference.serving.usage import TokenUsage
from inference.serving.writer import ReplyWriter, Run


def message_usage(usage: TokenUsage) -> MessageUsage:
    # Anthropic counts cache reads apart: input + cache_read is the whole prompt.
    return MessageUsage(
        input_tokens=usage.prompt - usage.cached,
        output_tokens=usage.completion,
        cache_read_input_tokens=usage.cached,
        truncated_messages=usage.truncated_messages or None,
    )


class MessageWriter(ReplyWriter):
    """The reply writer: message_start, ping, the content blocks' events, message_delta,
    message_stop; or the whole message."""

    def __init__(self, run: Run) -> None:
        super().__init__(run)
        self.request: MessagesRequest = run.body  # type: ignore[assignment]
        self.id = run.generation.id.replace("msg-", "msg_", 1)
        self.parser = run.parser()
        self.blocks = BlockStream()

    def message(self, **fields) -> MessageResponse:
        usage = message_usage(self.run.generation.usage())
        return MessageResponse(id=self.id, model=self.run.model, usage=usage, **fields)

    def opening(self) -> list[Wire]:
        return [MessageStart(message=self.message(content=[], stop_reason=None)), Ping()]

    def feed(self, choice: Choice, event: Delta | Done) -> list[Wire]:
        if isinstance(event, Delta):
            return self.blocks.feed(self.parser.feed(event.text))
        out = [*self.blocks.feed(self.parser.finish()), *self.blocks.close()]
        stops = self.request.stop_sequences or []
        reason, sequence = stop_reason(event, self.blocks.tool_calls > 0, stops)
        delta = StopDelta(stop_reason=reason, stop_sequence=sequence)
        return [
            *out,
            MessageDelta(delta=delta, usage=OutputUsage(output_tokens=event.completion_tokens)),
        ]

    async def closing(self) -> list[Wire]:
        return [MessageStop()]

    async def response(self) -> MessageResponse:
        run = self.run
        choice = run.generation.choices[0]
        reply = parse_reply(run.resolved.adapter, choice.text, run.plan.tool_use, run.thinking)
        stops = self.request.stop_sequences or []
        reason, sequence = stop_reason(choice.done, bool(reply.tool_calls), stops)
        return self.message(
            content=content_blocks(reply), stop_reason=reason, stop_sequence=sequence
        )
