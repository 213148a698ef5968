"""A reply's events (reasoning, text, tool calls) turned into output items and, as they grow,
into the typed stream events that announce them. Streaming and whole responses both build
their output here; a whole response just never sends the events."""

from __future__ import annotations

import itertools

from inference.protocol.openai.responses_events import (
    ContentPartEvent,
    FunctionCallArgumentsDelta,
    FunctionCallArgumentsDone,
    OutputItemEvent,
    OutputTextDelta,
    OutputTextDone,
    ReasoningTextDelta,
    ReasoningTextDone,
    StreamEvent,
)
from inference.protocol.openai.responses_input import OutputText
from inference.protocol.openai.responses_object import (
    FunctionCall,
    OutputMessage,
    ReasoningItem,
    ReasoningText,
)
from inference.serving.reply import (
    ReasoningDelta,
    ReplyEvent,
    TextDelta,
    ToolArgumentsDelta,
    ToolCallEnd,
    ToolCallStart,
)
from inference.serving.responses.items import new_id

Block = OutputMessage | ReasoningItem


class OutputBuilder:
    """Output items in the order the reply wrote them. `events` collects what a stream sends
    next (take them with `drain()`); every event gets the next sequence number."""

    def __init__(self, namespaced: dict[str, tuple[str, str]] | None = None) -> None:
        # Offered name -> (namespace, name) for the functions of namespace tools.
        self._namespaced = namespaced or {}
        self.output: list[OutputMessage | ReasoningItem | FunctionCall] = []
        self.events: list[StreamEvent] = []
        self._numbers = itertools.count()
        self._block: Block | None = None  # the message or reasoning being written
        self._calls: dict[int, FunctionCall] = {}  # by the parser's call index
        self._blank = ""  # whitespace waiting to see whether a message follows it

    def number(self) -> int:
        return next(self._numbers)

    def emit(self, event_type: type[StreamEvent], **fields) -> None:
        self.events.append(event_type(sequence_number=self.number(), **fields))

    def drain(self) -> list[StreamEvent]:
        events, self.events = self.events, []
        return events

    def add(self, event: ReplyEvent) -> None:
        if isinstance(event, ReasoningDelta):
            self._reasoning(event.text)
        elif isinstance(event, TextDelta):
            self._text(event.text)
        elif isinstance(event, ToolCallStart):
            self._call_start(event)
        elif isinstance(event, ToolArgumentsDelta):
            call = self._calls[event.index]
            call.arguments += event.text
            self.emit(
                FunctionCallArgumentsDelta,
                item_id=call.id,
                output_index=self.output.index(call),
                delta=event.text,
            )
        elif isinstance(event, ToolCallEnd):
            self._call_end(event)

    def finish(self, complete: bool) -> None:
        """Closes what is still open: completed, or incomplete when the reply was cut off."""
        self._close_block("completed" if complete else "incomplete")
        for call in self._calls.values():
            if call.status == "in_progress":
                call.status = "incomplete"
                self._item_done(call)

    # -- blocks: reasoning and messages

    def _reasoning(self, text: str) -> None:
        block = self._block
        if not isinstance(block, ReasoningItem):
            block = self._open(ReasoningItem(id=new_id("rs"), status="in_progress", content=[]))
            self._part(block, ReasoningText(text=""), added=True)
        block.content[0].text += text
        self.emit(ReasoningTextDelta, **self._where(block), delta=text)

    def _text(self, text: str) -> None:
        block = self._block
        if not isinstance(block, OutputMessage):
            if not text.strip():
                self._blank += text  # no message for the blank between reasoning and a call
                return
            text, self._blank = self._blank + text, ""
            block = self._open(OutputMessage(id=new_id("msg"), status="in_progress", content=[]))
            self._part(block, OutputText(text=""), added=True)
        block.content[0].text += text
        self.emit(OutputTextDelta, **self._where(block), delta=text)

    def _open(self, block: Block) -> Block:
        self._close_block("completed")
        self._block = block
        self._add_item(block)
        return block

    def _close_block(self, status: str) -> None:
        block, self._block = self._block, None
        self._blank = ""
        if block is None:
            return
        part = block.content[0]
        if isinstance(block, ReasoningItem):
            self.emit(ReasoningTextDone, **self._where(block), text=part.text)
        else:
            self.emit(OutputTextDone, **self._where(block), text=part.text)
        self._part(block, part, added=False)
        block.status = status  # type: ignore[assignment]
        self._item_done(block)

    def _where(self, block: Block) -> dict:
        return {"item_id": block.id, "output_index": self.output.index(block), "content_index": 0}

    def _part(self, block: Block, part: OutputText | ReasoningText, added: bool) -> None:
        if added:
            block.content.append(part)  # type: ignore[arg-type]
        kind = "response.content_part.added" if added else "response.content_part.done"
        self.emit(ContentPartEvent, type=kind, **self._where(block), part=part.model_copy())

    # -- items

    def _add_item(self, item: OutputMessage | ReasoningItem | FunctionCall) -> None:
        self.output.append(item)
        self.emit(
            OutputItemEvent,
            type="response.output_item.added",
            output_index=len(self.output) - 1,
            item=item.model_copy(deep=True),
        )

    def _item_done(self, item: OutputMessage | ReasoningItem | FunctionCall) -> None:
        self.emit(
            OutputItemEvent,
            type="response.output_item.done",
            output_index=self.output.index(item),
            item=item.model_copy(deep=True),
        )

    def _call_start(self, event: ToolCallStart) -> None:
        self._close_block("completed")
        namespace, name = self._namespaced.get(event.name, (None, event.name))
        call = FunctionCall(
            id=new_id("fc"),
            status="in_progress",
            call_id=event.id,
            name=name,
            namespace=namespace,
            arguments="",
        )
        self._calls[event.index] = call
        self._add_item(call)

    def _call_end(self, event: ToolCallEnd) -> None:
        call = self._calls[event.index]
        call.arguments = event.arguments
        call.status = "completed" if event.valid else "incomplete"
        self.emit(
            FunctionCallArgumentsDone,
            item_id=call.id,
            output_index=self.output.index(call),
            name=call.name,
            arguments=call.arguments,
        )
        self._item_done(call)
