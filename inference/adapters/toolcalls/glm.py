"""GLM 4.5 / 4.6 / 4.7's calls: the name right after `<tool_call>`, then key/value pairs.

    GLM-4.6:  <tool_call>get_weather
              <arg_key>city</arg_key>
              <arg_value>Paris</arg_value>
              </tool_call>
    GLM-4.7:  <tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>

Values are written bare (a string as is, anything else as JSON) and typed by the schema; the
name ends at a newline or the first `<` (`<arg_key>`, or `</tool_call>` for a call without
arguments). A forced call's grammar takes either version's newlines."""

from __future__ import annotations

from inference.adapters.toolcalls.base import CallEvent, Function, lit
from inference.adapters.toolcalls.tagged import TaggedSyntax

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
KEY = "<arg_key>"
KEY_END = "</arg_key>"
VALUE = "<arg_value>"
VALUE_END = "</arg_value>"


class GLMSyntax(TaggedSyntax):
    name = "glm"
    label = "GLM 4.5+: <tool_call>name<arg_key>…<arg_value>…"
    markers = (OPEN,)
    unfinished_states = ("key", "to_value", "value")
    value_close = VALUE_END

    def __init__(self, schemas: dict[str, dict] | None = None) -> None:
        super().__init__(schemas)
        self._pending_key = ""  # a key whose <arg_value> has not opened yet

    def _step(self, events: list[CallEvent]) -> bool:
        state = self._state
        if state == "between":
            _, tag = self._reader.until((OPEN,))
            self._state = "name" if tag else state
            return tag is not None
        if state == "name":
            return self._step_name(events)
        if state == "args":
            _, tag = self._reader.until((KEY, CLOSE))
            return self._next_argument(tag, events)
        if state == "key":
            word = self._read_word((KEY_END,))
            if word is not None:
                self._pending_key, self._state = word[0], "to_value"
            return word is not None
        if state == "to_value":
            _, tag = self._reader.until((VALUE, KEY, CLOSE))
            if tag == VALUE:
                self._key(self._pending_key, events)
                self._state = "value"
                return True
            return self._next_argument(tag, events)  # a key without a value is dropped
        tag = self._read_value((VALUE_END, KEY, CLOSE), events)
        if tag is not None:
            self._end_value(events)
        return self._next_argument(tag, events)

    def _step_name(self, events: list[CallEvent]) -> bool:
        # A name holds no `<`: it is whole at the first one (<arg_key> or </tool_call>), so
        # the call starts before that tag is all there.
        word = self._read_word(("\n", "<"))
        if word is None:
            return False
        name, tag = word
        if tag == "<":
            self._reader.unread("<")
        if not name:  # a newline before the name, or a call that never names a function
            self._state = "name" if tag == "\n" else "between"
            return True
        self._open(name, events)
        self._state = "args"
        return True

    def _next_argument(self, tag: str | None, events: list[CallEvent]) -> bool:
        """After a value: a key, the call's end, or more to read."""
        if tag is None:
            return False
        if tag == CLOSE:
            self._close(events)
        self._state = {KEY: "key", CLOSE: "between"}.get(tag, "args")
        return True

    def call_rule(self, function: Function) -> str:
        # GLM-4.6 puts a newline after the name and each tag pair, 4.7 none: either is taken.
        head = lit(f"{OPEN}{function.name}") + ' "\\n"?'
        return " ".join(p for p in (head, self.parameters_rule(function.schema), lit(CLOSE)) if p)

    def parameter_rule(self, key: str, schema: object) -> str:
        head = lit(f"{KEY}{key}{KEY_END}") + ' "\\n"? ' + lit(VALUE)
        return f'{head} {self.value_rule(schema, VALUE_END)} "\\n"?'
