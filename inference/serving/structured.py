"""Grammars for structured output, checked before any engine work (forced tool calls build
theirs in tooluse.py)."""

from __future__ import annotations

import llguidance

from inference.protocol.errors import APIError

# Compact separators and no free whitespace: small models otherwise pad JSON with blank lines.
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
ANY_OBJECT = {"type": "object"}


# Keywords whose value is one schema, a list of schemas, or a map of names to schemas.
_ONE_SCHEMA = ("items", "additionalItems", "contains", "not", "if", "then", "else")
_SCHEMA_LISTS = ("anyOf", "oneOf", "prefixItems")
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")


def closed_objects(schema: object, merged: bool = False) -> object:
    """The schema with every object that lists `properties` and says nothing of
    `additionalProperties` closed (`additionalProperties: false`), as llama.cpp's converter and
    xgrammar's strict mode read it: an open object lets a small model invent keys until
    max_tokens. An explicit `additionalProperties` (true or a schema) keeps it open. The
    branches of an `allOf` are merged into one object, so they are not closed one by one.
    A copy: the client's schema is left as it was."""
    if isinstance(schema, list):
        return [closed_objects(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    open_by_merge = merged or "allOf" in out
    if "properties" in out and "additionalProperties" not in out and not open_by_merge:
        out["additionalProperties"] = False
    for key in _ONE_SCHEMA:
        if key in out:
            out[key] = closed_objects(out[key])
    for key in _SCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [closed_objects(item) for item in out[key]]
    if isinstance(out.get("allOf"), list):
        out["allOf"] = [closed_objects(item, merged=True) for item in out["allOf"]]
    for key in _SCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: closed_objects(sub) for name, sub in out[key].items()}
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = closed_objects(out["additionalProperties"])
    return out


def json_grammar(schema: dict, param: str) -> str:
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            closed_objects(schema), defaults=JSON_STYLE
        )
    except ValueError as exc:
        raise APIError(f"Invalid JSON schema: {exc}", param=param) from None
    error = llguidance.LLMatcher.validate_grammar(grammar)
    if error:
        raise APIError(f"Invalid JSON schema: {error}", param=param)
    return grammar


def checked_grammar(lark: str, param: str) -> str:
    """A lark grammar (a forced tool call in a family's syntax) as llguidance takes it."""
    grammar = llguidance.grammar_from("lark", lark)
    error = llguidance.LLMatcher.validate_grammar(grammar)
    if error:
        raise APIError(f"Invalid tool schema: {error}", param=param)
    return grammar
