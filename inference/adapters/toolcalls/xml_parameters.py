"""Qwen3-Coder, Qwen3.5 and Nemotron 3 Nano's XML parameters:

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

A value is raw text (code, often with `<` in it) on lines of its own; typed by the schema.
What models really write is read too: a `</parameter>` left out before the next parameter or
`</function>`, no `<tool_call>` before the first `<function=` (as llama.cpp accepts), and a
Hermes JSON body inside `<tool_call>` (some Qwen3.5 quants), read by the JSON scanner."""

from __future__ import annotations

from inference.adapters.toolcalls.base import CallEvent, Function, lit
from inference.adapters.toolcalls.json_calls import CallScanner
from inference.adapters.toolcalls.tagged import TaggedSyntax

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
FUNCTION = "<function="
FUNCTION_END = "</function>"
PARAMETER = "<parameter="
PARAMETER_END = "</parameter>"
# A value ends at its close, or where a model that left the close out went on.
VALUE_ENDS = (PARAMETER_END, PARAMETER, FUNCTION_END, CLOSE)


class QwenXMLSyntax(TaggedSyntax):
    name = "qwen3_xml"
    label = "Qwen3-Coder / Qwen3.5: <tool_call><function=…><parameter=…>"
    markers = (OPEN, FUNCTION)
    strip_newline = True
    value_close = "\n" + PARAMETER_END

    def __init__(self, schemas: dict[str, dict] | None = None) -> None:
        super().__init__(schemas)
        self._json: CallScanner | None = None
        self._json_index = 0

    def _step(self, events: list[CallEvent]) -> bool:
        state = self._state
        if state == "between":
            _, tag = self._reader.until((OPEN, FUNCTION))
            return self._moved(tag, {OPEN: "body", FUNCTION: "name"})
        if state == "body":  # inside <tool_call>: a <function=…>, or a Hermes JSON object
            _, tag = self._reader.until((FUNCTION, "{", CLOSE))
            if tag == "{":
                self._reader.unread("{")
                self._json, self._json_index = CallScanner(), self._count
            return self._moved(tag, {FUNCTION: "name", "{": "json", CLOSE: "between"})
        if state == "json":
            return self._step_json(events)
        if state == "name":
            return self._step_name(events)
        if state == "params":
            _, tag = self._reader.until((PARAMETER, FUNCTION_END, CLOSE, FUNCTION))
            return self._after_parameter(tag, events)
        if state == "key":
            word = self._read_word((">",))
            if word is not None:
                self._key(word[0], events)
                self._state = "value"
            return word is not None
        tag = self._read_value(VALUE_ENDS, events)
        if tag is not None:
            self._end_value(events)
        return self._after_parameter(tag, events)

    def _moved(self, tag: str | None, states: dict[str, str]) -> bool:
        if tag is None:
            return False
        self._state = states[tag]
        return True

    def _step_name(self, events: list[CallEvent]) -> bool:
        word = self._read_word((">",))
        if word is None:
            return False
        self._open(word[0], events)
        self._state = "params"
        return True

    def _after_parameter(self, tag: str | None, events: list[CallEvent]) -> bool:
        """After a parameter (or before the first): the next one, or the call's end."""
        if tag is None:
            return False
        if tag in (PARAMETER, PARAMETER_END):
            self._state = "key" if tag == PARAMETER else "params"
            return True
        self._close(events)
        self._state = "name" if tag == FUNCTION else "between"
        return True

    def _step_json(self, events: list[CallEvent]) -> bool:
        """The JSON body, a character at a time so the text after its object is read here."""
        scanner = self._json
        assert scanner is not None
        text = self._reader.take_all()
        for at, char in enumerate(text):
            ended = False
            for event in scanner.feed(char):
                ended = ended or event.kind == "end"
                self._json_event(event, events)
            if ended:
                self._reader.unread(text[at + 1 :])
                self._json, self._state = None, "between"
                return True
        return False

    def _json_event(self, event: CallEvent, events: list[CallEvent]) -> None:
        index = self._json_index + event.index
        if event.kind == "start":
            self._count += 1
        last = events[-1] if events else None
        if event.kind == "arguments" and last and last.kind == "arguments" and last.index == index:
            events[-1] = CallEvent("arguments", index, event.name, last.text + event.text)
            return
        events.append(CallEvent(event.kind, index, event.name, event.text, event.valid))

    def finish(self) -> list[CallEvent]:
        if self._json is None:
            return super().finish()
        events: list[CallEvent] = []
        for event in self._json.finish():
            self._json_event(event, events)
        self._json, self._state = None, "between"
        return events

    def call_rule(self, function: Function) -> str:
        head = lit(f"{OPEN}\n{FUNCTION}{function.name}>\n")
        tail = lit(f"{FUNCTION_END}\n{CLOSE}")
        return " ".join(p for p in (head, self.parameters_rule(function.schema), tail) if p)

    def parameter_rule(self, key: str, schema: object) -> str:
        close = f"\n{PARAMETER_END}\n"
        return f"{lit(f'{PARAMETER}{key}>' + chr(10))} {self.value_rule(schema, close)}"
