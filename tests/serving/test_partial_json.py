"""Partial JSON, read once: the scanner every reader of cut-off JSON follows, and a call's
arguments as an object, as Anthropic (the partial JSON a stream's client assembles) and
Ollama ({} for what does not parse) each need them."""

from __future__ import annotations

import pytest

from inference.adapters.toolcalls.json_scan import JSONScan
from inference.serving.tooluse import arguments_object

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent


def test_the_scanner_follows_strings_escapes_and_brackets():
    scan = JSONScan()
    kinds = [scan.step(char) for char in '{"a\\"}": [1, "]']
    assert kinds[:3] == ["open", "string_start", "text"]
    assert kinds[3:6] == ["text", "text", "text"]  # an escaped quote and a bracket in a string
    assert kinds[6] == "string_end" and kinds[8] == "other" and kinds[9] == "open"
    assert scan.stack == ["{", "["] and scan.in_string and not scan.escaped
    assert scan.step("\\") == "text" and scan.escaped


def test_a_closing_bracket_with_none_open_closes_nothing():
    scan = JSONScan()
    assert scan.step("}") == "close" and scan.depth == 0
    assert [scan.step(c) for c in "[]"] == ["open", "close"] and scan.depth == 0


@pytest.mark.parametrize(
    "text, partial, expected",
    [
        ('{"city": "Paris", "days": 3}', True, {"city": "Paris", "days": 3}),
        ('{"city": "Paris", "days": 3}', False, {"city": "Paris", "days": 3}),
        ('{"city": "Par', True, {"city": "Par"}),
        ('{"city": "Par', False, {}),
        ('{"city": "Paris", "da', True, {"city": "Paris"}),
        ('{"tags": ["a", "b', True, {"tags": ["a", "b"]}),
        ("[1, 2]", True, {}),
        ("not json", True, {}),
    ],
)
def test_arguments_as_an_object(text, partial, expected):
    assert arguments_object(text, partial=partial) == expected
