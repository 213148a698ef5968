"""A parsed reply as Messages content blocks: whole (create) or as stream events, and why
the reply stopped."""

from __future__ import annotations

from pydantic import BaseModel

from inference.engine.types import Done
from inference.protocol.anthropic.events import (
    ContentBlockDelta,
    ContentBlockStart,
    ContentBlockStop,
    InputJSONDelta,
    SignatureDelta,
    ThinkingDelta,
)
from inference.protocol.anthropic.events import TextDelta as WireTextDelta
from inference.protocol.anthropic.responses import (
    OutputBlock,
    TextContent,
    ThinkingContent,
    ToolUseContent,
)
from inference.serving.reply import (
    ReasoningDelta,
    Reply,
    ReplyEvent,
    TextDelta,
    ToolArgumentsDelta,
    ToolCallEnd,
    ToolCallStart,
)
from inference.serving.tooluse import arguments_object


def tool_use_id(call_id: str) -> str:
    """Anthropic's ids read toolu_…; the parser's read call_…."""
    return "toolu_" + call_id.removeprefix("call_")


def content_blocks(reply: Reply) -> list[OutputBlock]:
    blocks: list[OutputBlock] = []
    if reply.reasoning:
        blocks.append(ThinkingContent(thinking=reply.reasoning))
    if reply.content and reply.content.strip():
        blocks.append(TextContent(text=reply.content))
    for call in reply.tool_calls:
        blocks.append(
            ToolUseContent(
                id=tool_use_id(call.id), name=call.name, input=arguments_object(call.arguments)
            )
        )
    return blocks


def stop_reason(
    done: Done, has_tool_calls: bool, stop_sequences: list[str]
) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence). A family's own stop strings are no stop_sequence."""
    if done.finish_reason == "length":
        return "max_tokens", None
    if has_tool_calls:
        return "tool_use", None
    if done.stop_sequence is not None and done.stop_sequence in stop_sequences:
        return "stop_sequence", done.stop_sequence
    return "end_turn", None


class BlockStream:
    """Reply events into content block events: a block opens when the kind of output
    changes (thinking, text, one tool call) and closes before the next one opens."""

    def __init__(self) -> None:
        self.index = -1
        self._open: str | None = None  # "thinking", "text" or "tool"
        self._space = ""  # whitespace that would open a text block alone: held
        self.tool_calls = 0

    def feed(self, events: list[ReplyEvent]) -> list[BaseModel]:
        out: list[BaseModel] = []
        for event in events:
            out.extend(self._one(event))
        return out

    def _one(self, event: ReplyEvent) -> list[BaseModel]:
        if isinstance(event, ReasoningDelta):
            return self._delta("thinking", ThinkingDelta(thinking=event.text))
        if isinstance(event, TextDelta):
            return self._text(event.text)
        if isinstance(event, ToolCallStart):
            self.tool_calls += 1
            block = ToolUseContent(id=tool_use_id(event.id), name=event.name, input={})
            return [*self.close(), *self._start("tool", block)]
        if isinstance(event, ToolArgumentsDelta) and self._open == "tool" and event.text:
            return [self._block_delta(InputJSONDelta(partial_json=event.text))]
        if isinstance(event, ToolCallEnd):
            return self.close()
        return []

    def _text(self, text: str) -> list[BaseModel]:
        if self._open != "text" and not text.strip():
            self._space += text
            return []
        text, self._space = self._space + text, ""
        return self._delta("text", WireTextDelta(text=text))

    def _delta(self, kind: str, delta: BaseModel) -> list[BaseModel]:
        out: list[BaseModel] = []
        if self._open != kind:
            empty = ThinkingContent(thinking="") if kind == "thinking" else TextContent(text="")
            out = [*self.close(), *self._start(kind, empty)]
        return [*out, self._block_delta(delta)]

    def _start(self, kind: str, block: OutputBlock) -> list[BaseModel]:
        self.index += 1
        self._open = kind
        return [ContentBlockStart(index=self.index, content_block=block)]

    def _block_delta(self, delta: BaseModel) -> ContentBlockDelta:
        return ContentBlockDelta(index=self.index, delta=delta)

    def close(self) -> list[BaseModel]:
        """Ends the open block; thinking ends with its (empty) signature, as the SDK expects."""
        if self._open is None:
            return []
        out: list[BaseModel] = []
        if self._open == "thinking":
            out.append(self._block_delta(SignatureDelta(signature="")))
        self._open = None
        return [*out, ContentBlockStop(index=self.index)]
