"""Grammars for structured output, checked before any engine work (forced tool calls build
theirs in tooluse.py)."""

from __future__ import annotations

import llguidance

from inference.protocol.errors import APIError
from inference.protocol.openai.chat import ResponseFormatJSONObject, ResponseFormatJSONSchema

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


def response_format_grammar(response_format: object) -> str | None:
    """Chat's response_format as a grammar (None: free text)."""
    if isinstance(response_format, ResponseFormatJSONObject):
        return json_grammar(ANY_OBJECT, "response_format")
    if isinstance(response_format, ResponseFormatJSONSchema):
        schema = response_format.json_schema.schema_ or ANY_OBJECT
        return json_grammar(schema, "response_format.json_schema.schema")
    return None
