"""Grammars for response_format and forced tool calls, checked before any engine work."""

from __future__ import annotations

import json

import llguidance

from inference.protocol.errors import APIError
from inference.protocol.openai.chat import (
    ChatCompletionRequest,
    NamedToolChoice,
    ResponseFormatJSONObject,
    ResponseFormatJSONSchema,
    ToolDefinition,
)

# Compact separators and no free whitespace: small models otherwise pad JSON with blank lines.
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
ANY_OBJECT = {"type": "object"}


def json_grammar(schema: dict, param: str) -> str:
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_STYLE)
    except ValueError as exc:
        raise APIError(f"Invalid JSON schema: {exc}", param=param) from None
    error = llguidance.LLMatcher.validate_grammar(grammar)
    if error:
        raise APIError(f"Invalid JSON schema: {error}", param=param)
    return grammar


def parameters_schema(tool: ToolDefinition) -> dict:
    return tool.function.parameters or {"type": "object", "properties": {}}


def forced_calls_schema(tools: list[ToolDefinition], parallel: bool) -> dict:
    """tool_choice "required": a JSON list of {name, parameters} (vLLM's convention)."""
    call = {
        "anyOf": [
            {
                "type": "object",
                "properties": {
                    "name": {"const": tool.function.name},
                    "parameters": parameters_schema(tool),
                },
                "required": ["name", "parameters"],
                "additionalProperties": False,
            }
            for tool in tools
        ]
    }
    schema: dict = {"type": "array", "items": call, "minItems": 1}
    if not parallel:
        schema["maxItems"] = 1
    return schema


def chat_grammar(request: ChatCompletionRequest) -> str | None:
    choice = request.effective_tool_choice()
    if isinstance(choice, NamedToolChoice):
        tool = next(t for t in request.tools or [] if t.function.name == choice.function.name)
        return json_grammar(parameters_schema(tool), "tools")
    if choice == "required":
        return json_grammar(
            forced_calls_schema(request.tools or [], request.parallel_tool_calls), "tools"
        )
    response_format = request.response_format
    if isinstance(response_format, ResponseFormatJSONObject):
        return json_grammar(ANY_OBJECT, "response_format")
    if isinstance(response_format, ResponseFormatJSONSchema):
        schema = response_format.json_schema.schema_ or ANY_OBJECT
        return json_grammar(schema, "response_format.json_schema.schema")
    return None


def forced_calls(request: ChatCompletionRequest, text: str) -> list[tuple[str, str]]:
    """(name, arguments JSON) of the calls a constrained reply holds."""
    choice = request.effective_tool_choice()
    if isinstance(choice, NamedToolChoice):
        return [(choice.function.name, text.strip())]
    try:
        calls = json.loads(text)
    except ValueError:
        return []  # cut off by max_tokens before the JSON closed
    return [(c["name"], json.dumps(c["parameters"], ensure_ascii=False)) for c in calls]
