"""The JSON syntaxes (Hermes, Llama 3, Mistral): read at every split, and their forced calls."""

import pytest

from tests.adapters.toolcalls.harness import grammar_accepts, stream_at_every_split

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

PARIS = ("get_weather", {"city": "Paris", "days": 3})


@pytest.mark.parametrize(
    ("syntax", "text", "content", "calls"),
    [
        (
            "hermes",
            'Sure.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n'
            '</tool_call>\n<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>',
            "Sure.",
            [PARIS, ("now", {})],
        ),
        (
            "llama3_json",
            '{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}',
            None,
            [PARIS],
        ),
        ("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}', None, [PARIS]),
        (
            "granite",
            'On it.<|tool_call|>[{"name": "get_weather", "arguments": '
            '{"city": "Paris", "days": 3}}, {"name": "now", "arguments": {}}]',
            "On it.",
            [PARIS, ("now", {})],
        ),
        (
            "nemotron",
            '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]'
            "</TOOLCALL>",
            None,
            [PARIS],
        ),
        (
            "command_r",
            '<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "get_weather", '
            '"parameters": {"city": "Paris", "days": 3}}\n]<|END_ACTION|>',
            None,
            [PARIS],
        ),
    ],
)
def test_read_at_every_split(syntax, text, content, calls):
    assert stream_at_every_split(syntax, text) == (content, calls)


@pytest.mark.parametrize(
    ("syntax", "text"),
    [
        (
            "hermes",
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'
            "\n</tool_call>",
        ),
        ("llama3_json", '{"name": "get_weather", "parameters": {"city": "Paris"}}'),
        ("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}'),
        ("granite", '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]'),
        (
            "nemotron",
            '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</TOOLCALL>',
        ),
        (
            "command_r",
            '<|START_ACTION|>[{"tool_name": "get_weather", "parameters": {"city": "Paris"}}]'
            "<|END_ACTION|>",
        ),
    ],
)
def test_forced_grammar_writes_the_syntax(hf_tokenizer, syntax, text):
    assert grammar_accepts(hf_tokenizer, syntax, text)
    assert not grammar_accepts(hf_tokenizer, syntax, text.replace("get_weather", "get_weathers"))
