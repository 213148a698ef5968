"""Forced-call grammars compiled for a model: marker text becomes the model's own tokens."""

import pytest

from inference.engine.grammar_tokens import with_marker_tokens

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

TOKENS = {"<tool_call>": 7, "</tool_call>": 8, "<|channel|>": 9, "<|ch": 10}


def test_markers_in_rule_literals_become_tokens():
    lark = 'call_0: "<tool_call>\\n<function=f>" ARG "</tool_call>"?\nstart: call_0'
    assert with_marker_tokens(lark, TOKENS) == (
        'call_0: (<[7]> "\\n<function=f>") ARG (<[8]>)?\nstart: call_0'
    )


def test_longest_marker_first_and_text_around_kept():
    assert with_marker_tokens('a: "x<|channel|>y"', TOKENS) == 'a: ("x" <[9]> "y")'


def test_json_bodies_regexes_and_terminals_untouched():
    lark = (
        'a: "<tool_call>" %json {"description": "<tool_call>", "type": "string"} /<tool_call>/\n'
        'VALUE: (/(?s:.*)/ & ~/(?s:.*)<\\/tool_call>(?s:.*)/) "</tool_call>"'
    )
    rewritten = with_marker_tokens(lark, TOKENS)
    first, terminal = rewritten.split("\n")
    assert (
        first == 'a: (<[7]>) %json {"description": "<tool_call>", "type": "string"} /<tool_call>/'
    )
    assert terminal == lark.split("\n")[1]


def test_json_schema_grammars_and_plain_vocabularies_unchanged():
    grammar = '{ "grammars": [{ "json_schema": {"const": "<tool_call>"} }] }'
    assert with_marker_tokens(grammar, TOKENS) == grammar
    assert with_marker_tokens('a: "<tool_call>"', {}) == 'a: "<tool_call>"'
