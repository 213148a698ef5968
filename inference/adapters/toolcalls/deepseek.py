"""DeepSeek's tool calls, in the three shapes its models write (the bars in its markers are
fullwidth, U+FF5C, and the spaces U+2581; written plainly here):

- V3.1 (and V3-0324 fine-tunes): `<|tool_calls_begin|><|tool_call_begin|>NAME<|tool_sep|>{JSON}
  <|tool_call_end|>…<|tool_calls_end|>`;
- R1: `<|tool_call_begin|>function<|tool_sep|>NAME\\n```json\\n{JSON}\\n```<|tool_call_end|>`;
- V3.2 / V4 (DSML): `<|DSML|function_calls>` (V4: `tool_calls`), then per call
  `<|DSML|invoke name="NAME">` with `<|DSML|parameter name="k" string="true|false">V</…>`.

One reader serves all three, since a family row cannot tell which DeepSeek wrote the reply.
`MarkedCalls`, `JSONValue` and `TaggedArguments` (marked.py) are shared with the other marker
syntaxes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from inference.adapters.toolcalls.base import (
    Function,
    json_rule,
    lit,
    text_until,
)
from inference.adapters.toolcalls.marked import (
    JSONValue,
    MarkedCalls,
    TaggedArguments,
    attributes,
    ordered_arguments,
    schema_order,
)

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
DSML = "｜DSML｜"
INVOKE = f"<{DSML}invoke"
INVOKE_END = f"</{DSML}invoke>"
PARAMETER = f"<{DSML}parameter"
PARAMETER_END = f"</{DSML}parameter>"


class DeepSeekSyntax(MarkedCalls):
    name = "deepseek"
    label = "DeepSeek V3.1+: <｜tool▁calls▁begin｜>… (R1's ```json and V3.2/V4's DSML read too)"
    markers = (CALLS_BEGIN, CALL_BEGIN, f"<{DSML}function_calls>", f"<{DSML}tool_calls>")
    call_separator = ""
    calls_prefix = CALLS_BEGIN
    calls_suffix = CALLS_END
    # V3.1's template renders calls but never describes tools: the prompt shows this one.
    example = (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function_name<｜tool▁sep｜>"
        '{"arg": "value"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    )

    def __init__(self, schemas: Mapping[str, dict] | None = None) -> None:
        super().__init__(schemas)
        self._json = JSONValue()
        self._writer = TaggedArguments(None)

    def _between(self) -> bool:
        marker = self._skip_to(CALL_BEGIN, INVOKE)
        if marker is not None:
            self._state = "head" if marker == CALL_BEGIN else "invoke"
        return marker is not None

    def _head(self) -> bool:
        head = self._until(SEP)
        if head is None:
            return False
        if head.strip() == "function" and "function" not in self.schemas:
            self._state = "r1_name"  # R1: the type, then the name on the line after the sep
            return True
        return self._begin_json(head.strip())

    def _r1_name(self) -> bool:
        name = self._until("\n")
        return name is not None and self._begin_json(name.strip())

    def _begin_json(self, name: str) -> bool:
        self._start(name)
        self._json, self._state = JSONValue(), "fence"
        return True

    def _fence(self) -> bool:
        """R1 puts its arguments in a ```json fence: skip to the object."""
        start = self._buf.find("{")
        if start < 0:
            self._buf = ""
            return False
        self._buf, self._state = self._buf[start:], "arguments"
        return True

    def _invoke(self) -> bool:
        head = self._until(">")
        if head is None:
            return False
        self._start(attributes(head).get("name", head.strip()))
        self._writer, self._state = TaggedArguments(self.schemas.get(self._name or "")), "params"
        return True

    def _params(self) -> bool:
        marker = self._skip_to(PARAMETER, INVOKE_END)
        if marker == INVOKE_END:
            self._args(self._writer.close())
            self._end()
            self._state = "between"
        elif marker == PARAMETER:
            self._state = "param_head"
        return marker is not None

    def _param_head(self) -> bool:
        head = self._until(">")
        if head is None:
            return False
        found = attributes(head)
        self._args(self._writer.key(found.get("name", ""), found.get("string") == "true"))
        self._state = "value"
        return True

    def _value(self) -> bool:
        return self._tagged_value(PARAMETER_END, "params")

    def _cut_off(self) -> None:
        self._cut_off_tagged("value", ("value", "params", "param_head"))  # DSML's

    def call_rule(self, function: Function) -> str:
        head = lit(f"{CALL_BEGIN}{function.name}{SEP}")
        return f"{head} {json_rule(function.schema)} {lit(CALL_END)}"


class DeepSeekDSMLSyntax(DeepSeekSyntax):
    """V3.2's grammar: a forced call written in DSML (reading is DeepSeekSyntax's)."""

    name = "deepseek_dsml"
    label = 'DeepSeek V3.2: <｜DSML｜function_calls><｜DSML｜invoke name="…">'
    call_separator = ""
    calls_prefix = f"<{DSML}function_calls>\n"
    calls_suffix = f"</{DSML}function_calls>"

    def call_rule(self, function: Function) -> str:
        properties = function.schema.get("properties") or {}
        args = [(self._parameter(k, properties[k]), r) for k, r in schema_order(function.schema)]
        head = lit(f'{INVOKE} name="{function.name}">\n')
        return f"{head} {ordered_arguments(args, '')} {lit(INVOKE_END + chr(10))}"

    def grammar(self, functions: Sequence[Function], parallel: bool) -> str:
        return super().grammar(functions, parallel) + "\n" + text_until("DSML_VALUE", PARAMETER_END)

    @staticmethod
    def _parameter(key: str, schema: dict) -> str:
        string = schema.get("type") == "string"
        head = lit(f'{PARAMETER} name="{key}" string="{str(string).lower()}">')
        if string:  # the value's terminal takes its closing tag too
            return f"{head} DSML_VALUE {lit(chr(10))}"
        return f"{head} {json_rule(schema)} {lit(PARAMETER_END + chr(10))}"


class DeepSeekV4Syntax(DeepSeekDSMLSyntax):
    name = "deepseek_v4"
    label = 'DeepSeek V4: <｜DSML｜tool_calls><｜DSML｜invoke name="…">'
    calls_prefix = f"<{DSML}tool_calls>\n"
    calls_suffix = f"</{DSML}tool_calls>"
