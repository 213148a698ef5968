"""Grammars close objects: a schema with `properties` and no `additionalProperties` admits
no other keys (as llama.cpp's converter and xgrammar's strict mode read it)."""

from __future__ import annotations

import json

import llguidance
import pytest

from inference.serving.structured import closed_objects, json_grammar

pytestmark = pytest.mark.database_independent

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def matches(schema: dict, value: object) -> bool:
    grammar = json_grammar(schema, "tools")
    return llguidance.LLMatcher.validate_grammar(grammar) == "" and _accepts(grammar, value)


def _accepts(grammar: str, value: object) -> bool:
    """Whether the grammar takes the compact JSON text of `value` (byte-level tokenizer)."""
    tokenizer = llguidance.LLTokenizer("byte")
    matcher = llguidance.LLMatcher(tokenizer, grammar)
    text = json.dumps(value, separators=(", ", ": "))
    ok = matcher.consume_tokens(tokenizer.tokenize_str(text))
    return ok and matcher.is_accepting()


def test_an_object_with_properties_is_closed():
    assert closed_objects(CITY)["additionalProperties"] is False
    assert "additionalProperties" not in CITY  # the client's schema is untouched
    assert matches(CITY, {"city": "Paris"})
    assert not matches(CITY, {"city": "Paris", "weather": "sunny"})


def test_explicitly_open_objects_stay_open():
    schema = {**CITY, "additionalProperties": True}
    assert closed_objects(schema)["additionalProperties"] is True
    assert matches(schema, {"city": "Paris", "weather": "sunny"})
    typed = {**CITY, "additionalProperties": {"type": "integer"}}
    assert matches(typed, {"city": "Paris", "days": 3})
    assert not matches(typed, {"city": "Paris", "days": "three"})


def test_an_object_without_properties_stays_open():
    assert closed_objects({"type": "object"}) == {"type": "object"}
    assert matches({"type": "object"}, {"anything": 1})


def test_nested_objects_are_closed_everywhere():
    schema = {
        "type": "object",
        "properties": {
            "place": CITY,
            "stops": {"type": "array", "items": CITY},
            "either": {"anyOf": [CITY, {"type": "string"}]},
            "ref": {"$ref": "#/$defs/city"},
        },
        "$defs": {"city": CITY},
    }
    closed = closed_objects(schema)
    assert closed["properties"]["place"]["additionalProperties"] is False
    assert closed["properties"]["stops"]["items"]["additionalProperties"] is False
    assert closed["properties"]["either"]["anyOf"][0]["additionalProperties"] is False
    assert closed["$defs"]["city"]["additionalProperties"] is False
    assert not matches(schema, {"ref": {"city": "Paris", "extra": 1}})
    assert matches(schema, {"stops": [{"city": "Rome"}], "ref": {"city": "Paris"}})


def test_all_of_branches_merge_and_stay_open_to_each_other():
    schema = {
        "allOf": [CITY, {"type": "object", "properties": {"days": {"type": "integer"}}}],
    }
    closed = closed_objects(schema)
    assert "additionalProperties" not in closed["allOf"][0]
    assert matches(schema, {"city": "Paris", "days": 3})


def test_a_property_named_like_a_keyword_is_a_schema_not_a_keyword():
    schema = {"type": "object", "properties": {"properties": CITY, "items": {"type": "string"}}}
    closed = closed_objects(schema)
    assert closed["properties"]["properties"]["additionalProperties"] is False
    assert closed["properties"]["items"] == {"type": "string"}
