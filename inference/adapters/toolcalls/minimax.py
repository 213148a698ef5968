"""MiniMax M2's calls: one block holding one `<invoke>` per call (parallel calls share it).

    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    </invoke>
    </minimax:tool_call>

Values are written bare (a string as is, anything else as JSON), typed by the schema."""

from __future__ import annotations

from inference.adapters.toolcalls.base import CallEvent, Function, lit
from inference.adapters.toolcalls.tagged import TaggedSyntax, attribute

BLOCK = "<minimax:tool_call>"
BLOCK_END = "</minimax:tool_call>"
INVOKE = "<invoke"
INVOKE_END = "</invoke>"
PARAMETER = "<parameter"
PARAMETER_END = "</parameter>"
# A value ends at its close, or where a model that left the close out went on.
NEXT_PARAMETER = '<parameter name="'
VALUE_ENDS = (PARAMETER_END, NEXT_PARAMETER, INVOKE_END, BLOCK_END)


class MiniMaxSyntax(TaggedSyntax):
    name = "minimax"
    label = 'MiniMax M2: <invoke name="…"><parameter name="…">'
    markers = (BLOCK,)
    value_close = PARAMETER_END
    call_separator = ""
    calls_prefix = BLOCK + "\n"
    calls_suffix = BLOCK_END

    def _step(self, events: list[CallEvent]) -> bool:
        state = self._state
        if state == "between":
            _, tag = self._reader.until((INVOKE,))
            self._state = "name" if tag else state
            return tag is not None
        if state in ("name", "key"):
            word = self._read_word((">",))
            if word is None:
                return False
            if state == "name":
                self._open(attribute(word[0]), events)
            else:
                self._key(attribute(word[0]), events)
            self._state = "params" if state == "name" else "value"
            return True
        if state == "params":
            _, tag = self._reader.until((PARAMETER, INVOKE_END, BLOCK_END))
            return self._after_parameter(tag, events)
        tag = self._read_value(VALUE_ENDS, events)
        if tag is not None:
            self._end_value(events)
        return self._after_parameter(tag, events)

    def _after_parameter(self, tag: str | None, events: list[CallEvent]) -> bool:
        if tag is None:
            return False
        if tag == PARAMETER_END:
            self._state = "params"
            return True
        if tag in (PARAMETER, NEXT_PARAMETER):
            if tag == NEXT_PARAMETER:
                self._reader.unread('"')  # the key's own quote, for attribute()
            self._state = "key"
            return True
        self._close(events)
        self._state = "between"
        return True

    def call_rule(self, function: Function) -> str:
        head = lit(f'{INVOKE} name="{function.name}">\n')
        tail = lit(f"{INVOKE_END}\n")
        return " ".join(p for p in (head, self.parameters_rule(function.schema), tail) if p)

    def parameter_rule(self, key: str, schema: object) -> str:
        head = lit(f'{PARAMETER} name="{key}">')
        return f"{head} {self.value_rule(schema, PARAMETER_END + chr(10))}"
