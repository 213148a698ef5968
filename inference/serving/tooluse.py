"""Tools as every dialect offers them, reduced to one shape: the functions a reply may call,
how it must call them (none, auto, required, one named function), and the grammar that forces
a call when one is required. Chat, Messages and Responses each translate into a ToolUse."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from inference.adapters.toolcalls import Function, ToolSyntax
from inference.adapters.toolcalls.json_scan import JSONScan
from inference.serving.structured import checked_grammar, closed_objects, json_grammar

EMPTY_PARAMETERS = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class FunctionTool:
    name: str
    description: str | None = None
    parameters: dict | None = None  # a JSON schema for the arguments object

    @property
    def schema(self) -> dict:
        return self.parameters or EMPTY_PARAMETERS

    def template_dict(self) -> dict:
        """What chat templates expect in `tools` (OpenAI's chat shape)."""
        function: dict = {"name": self.name, "parameters": self.schema}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolUse:
    tools: tuple[FunctionTool, ...] = ()
    # none: tools are not offered; auto: the model decides; required: at least one call.
    choice: Literal["none", "auto", "required"] = "auto"
    forced: str | None = None  # the one function the reply must call
    parallel: bool = True
    # A required reply's grammar lets the model write several calls only when the client asked
    # for parallel calls in so many words (as llama.cpp's server defaults to one): a model that
    # was never trained on the family's format repeats its call until max_tokens otherwise.
    parallel_asked: bool = False

    @property
    def mode(self) -> str:
        """none, auto, required or forced, as the reply parser and prompt need it."""
        if not self.tools or self.choice == "none":
            return "none"
        if self.forced:
            return "forced"
        return self.choice

    def template_tools(self) -> list[dict] | None:
        if self.mode == "none":
            return None
        return [tool.template_dict() for tool in self.tools] or None

    def schemas(self) -> dict[str, dict]:
        """Each offered function's parameters schema, by name (how a syntax types arguments)."""
        return {tool.name: tool.schema for tool in self.tools}

    def grammar(self, syntax: ToolSyntax, param: str = "tools") -> str | None:
        """The constraint a forced or required call decodes under, in the family's own syntax
        (a model forced to call writes what it was trained to write); None when free."""
        if self.mode == "forced":
            tools = [t for t in self.tools if t.name == self.forced]
            parallel = False
        elif self.mode == "required":
            tools, parallel = list(self.tools), self.parallel and self.parallel_asked
        else:
            return None
        for tool in tools:
            json_grammar(tool.schema, param)  # an invalid schema is the client's 400
        functions = [Function(tool.name, closed_objects(tool.schema)) for tool in tools]
        return checked_grammar(syntax.grammar(functions, parallel), param)


def arguments_object(arguments: str, partial: bool = True) -> dict:
    """A call's arguments as an object; {} when they are not one. A call cut off by max_tokens
    gives, with `partial`, what its partial JSON holds so far, read as Anthropic's SDKs read a
    stream's partial_json (an open string is closed, an unfinished key or literal dropped),
    never a made-up value, so a whole message's tool_use input is what a stream's client put
    together. Without it, {}: Ollama sends each call whole, never partial JSON, and its own
    server answers a call it cannot read with empty arguments."""
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):  # deep nesting: text as it came
        value = _partial_json(arguments) if partial else None
    return value if isinstance(value, dict) else {}


def _partial_json(text: str) -> object:
    """The longest prefix of cut-off JSON that closes into a value: tried whole, then before
    each comma and after each opening bracket, from the last one back."""
    for end in [len(text), *reversed(_scan(text)[0])]:
        head = text[:end].rstrip().removesuffix(",")
        _, stack, in_string, escaped = _scan(head)
        if escaped:  # a lone backslash would escape the closing quote
            head = head[:-1]
        closing = '"' if in_string else ""
        closing += "".join("}" if b == "{" else "]" for b in reversed(stack))
        try:
            return json.loads(head + closing)
        except (ValueError, RecursionError):  # deep nesting: text as it came
            continue
    return None


def _scan(text: str) -> tuple[list[int], list[str], bool, bool]:
    """Where a cut keeps only whole members (before a comma, after a bracket), outside
    strings; the brackets still open at the end; whether it ends inside a string, and right
    after a backslash there."""
    cuts: list[int] = []
    scan = JSONScan()
    for i, char in enumerate(text):
        kind = scan.step(char)
        if kind == "open":
            cuts.append(i + 1)
        elif kind == "other" and char == ",":
            cuts.append(i)
    return cuts, scan.stack, scan.in_string, scan.escaped
