"""Tool calls out of generated text, for whole replies and for streams."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from inference.adapters import FamilyAdapter
from inference.engine.stops import StopStringMatcher
from inference.protocol.openai.chat import (
    ChatCompletionRequest,
    FunctionCall,
    NamedToolChoice,
    ToolCall,
)
from inference.serving.structured import forced_calls


def call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def tool_call(name: str, arguments: str) -> ToolCall:
    return ToolCall(id=call_id(), function=FunctionCall(name=name, arguments=arguments))


@dataclass(frozen=True)
class Reply:
    content: str | None
    tool_calls: list[ToolCall]


def split_reply(request: ChatCompletionRequest, adapter: FamilyAdapter, text: str) -> Reply:
    """The reply's text, or its tool calls and whatever text came before them."""
    mode = request.effective_tool_choice()
    if mode == "none":
        return Reply(text, [])
    if mode == "required" or isinstance(mode, NamedToolChoice):
        calls = [tool_call(name, args) for name, args in forced_calls(request, text)]
        return Reply(None if calls else text, calls)
    parsed = adapter.parse_tool_calls(text)
    calls = [tool_call(c.name, c.arguments) for c in parsed.calls]
    if not request.parallel_tool_calls:
        calls = calls[:1]
    return Reply(parsed.content if calls else text, calls)


class StreamedReply:
    """Streams content until a tool call starts, then holds the rest for parsing at the end."""

    def __init__(self, request: ChatCompletionRequest, adapter: FamilyAdapter) -> None:
        self._request = request
        self._adapter = adapter
        mode = request.effective_tool_choice()
        self._passthrough = mode == "none"
        self._hold_all = mode == "required" or isinstance(mode, NamedToolChoice)
        self._markers = StopStringMatcher(adapter.tool_call_markers)
        self._text = ""
        self._released = 0
        self._holding = self._hold_all

    def feed(self, text: str) -> str:
        self._text += text
        if self._passthrough:
            return self._release(len(self._text))
        if self._holding:
            return ""
        opener = self._adapter.tool_call_opens_with
        if opener and self._released == 0:
            head = self._text.lstrip()
            if not head:
                return ""  # only whitespace so far: cannot tell yet
            if head.startswith(opener):
                self._holding = True
                return ""
            text = self._text  # release what was held while deciding
        released, hit = self._markers.feed(text)
        self._holding = hit
        return self._release(self._released + len(released))

    def finish(self) -> tuple[str, list[ToolCall]]:
        """(content still to send, tool calls) once generation is done."""
        if self._passthrough or not self._holding:
            return self._release(len(self._text)), []
        reply = split_reply(self._request, self._adapter, self._text)
        if reply.tool_calls:
            return "", reply.tool_calls
        return self._release(len(self._text)), []

    def _release(self, upto: int) -> str:
        released, self._released = self._text[self._released : upto], upto
        return released
