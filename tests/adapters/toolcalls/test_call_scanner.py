"""CallScanner, the JSON reader behind Hermes, Llama 3 and Mistral calls, on its own: fed at
every split, what it hands on as a call's arguments is exactly the arguments' JSON as the
model wrote it, whatever the strings inside hold."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from inference.adapters.toolcalls.base import CallEvent
from inference.adapters.toolcalls.json_calls import CallScanner

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent


@dataclass(frozen=True)
class Call:
    name: str
    arguments: str  # as handed on: the deltas' concatenation, which is also the end's text
    valid: bool = True


def scan(pieces: list[str], name_keys: tuple[str, ...] = ("name",)) -> list[CallEvent]:
    scanner = CallScanner(name_keys)
    events = [event for piece in pieces for event in scanner.feed(piece)]
    return events + scanner.finish()


def calls_of(events: list[CallEvent]) -> list[Call]:
    """The calls the events describe, checking their order: one start, then the arguments'
    pieces, then one end, per call, indices counting up from 0."""
    calls, deltas, open_index = [], "", None
    for event in events:
        if event.kind == "start":
            assert open_index is None and event.index == len(calls), events
            open_index, deltas = event.index, ""
        elif event.kind == "arguments":
            assert event.index == open_index, events
            deltas += event.text
        else:
            assert event.index == open_index, events
            assert deltas == event.text, (deltas, event.text)
            calls.append(Call(event.name, event.text, event.valid))
            open_index = None
    assert open_index is None, f"a call started and never ended: {events}"
    return calls


def pieces_of(text: str) -> list[list[str]]:
    """The text whole, cut once at every position, and in pieces of every size."""
    cuts = [[text[:i], text[i:]] for i in range(1, len(text))]
    sizes = [[text[i : i + n] for i in range(0, len(text), n)] for n in range(1, len(text))]
    return [[text], *cuts, *sizes]


def read_at_every_split(text: str, name_keys: tuple[str, ...] = ("name",)) -> list[Call]:
    whole = calls_of(scan([text], name_keys))
    for pieces in pieces_of(text):
        assert calls_of(scan(pieces, name_keys)) == whole, pieces
    return whole


WEATHER = '{"city": "Paris", "days": 3}'


def test_a_tagged_call_hands_on_its_arguments_exactly():
    text = f'<tool_call>\n{{"name": "get_weather", "arguments": {WEATHER}}}\n</tool_call>'
    assert read_at_every_split(text) == [Call("get_weather", WEATHER)]


def test_arguments_keep_the_model_s_own_spacing():
    arguments = '{\n  "city":"Paris" ,\n\t"days" :  3\n}'
    text = f'{{ "name" : "get_weather" ,\n "arguments" :{arguments} }}'
    assert read_at_every_split(text) == [Call("get_weather", arguments)]


def test_escaped_quotes_and_brackets_inside_strings():
    arguments = r'{"q": "say \"hi\" {not} [an] }{ object", "path": "C:\\dir\\", "e": "\\\""}'
    assert json.loads(arguments)["path"] == "C:\\dir\\"  # the text is JSON, as written
    text = f'{{"name": "search", "arguments": {arguments}}}'
    assert read_at_every_split(text) == [Call("search", arguments)]


def test_a_name_with_escapes_and_braces():
    text = r'{"name": "odd \"{name}\"", "arguments": {}}'
    assert read_at_every_split(text) == [Call('odd "{name}"', "{}")]


def test_nested_objects_and_lists():
    arguments = (
        '{"filter": {"and": [{"field": "a", "value": {"n": [1, {"m": null}]}}, {"or": []}]}, '
        '"deep": {"a": {"b": {"c": {}}}}, "list": [[], [[]], {}]}'
    )
    text = f'{{"name": "query", "arguments": {arguments}}}'
    assert read_at_every_split(text) == [Call("query", arguments)]


def test_keys_inside_the_arguments_are_the_arguments_own():
    arguments = '{"name": "inner", "arguments": {"name": "deeper"}, "parameters": 1}'
    text = f'{{"name": "outer", "arguments": {arguments}}}'
    assert read_at_every_split(text) == [Call("outer", arguments)]


def test_arguments_written_before_the_name():
    text = f'{{"id": {{"x": "}}"}}, "arguments": {WEATHER}, "name": "get_weather"}}'
    assert read_at_every_split(text) == [Call("get_weather", WEATHER)]


def test_unicode_escapes():
    # Names are decoded; arguments are handed on as written (escapes included): JSON either way.
    arguments = r'{"city": "S\u00e3o Paulo \ud83c\udf0e", "raw": "Zürich ☀"}'
    text = r'{"n\u0061me": "get_\u0077eather", "arguments": ' + arguments + "}"
    assert read_at_every_split(text) == [Call("get_weather", arguments)]
    assert json.loads(arguments)["city"] == "São Paulo 🌎"


def test_several_calls_count_up():
    first, second = '{"city": "Paris"}', '{"zone": "UTC", "nested": {"k": [1, 2]}}'
    hermes = (
        f'<tool_call>\n{{"name": "get_weather", "arguments": {first}}}\n</tool_call>\n'
        f'<tool_call>\n{{"name": "now", "arguments": {second}}}\n</tool_call>'
    )
    llama = (
        f'{{"name": "get_weather", "parameters": {first}}}; '
        f'{{"name": "now", "parameters": {second}}}'
    )
    expected = [Call("get_weather", first), Call("now", second)]
    assert read_at_every_split(hermes) == expected
    assert read_at_every_split(llama) == expected


def test_mistral_calls_old_and_new():
    first, second = '{"s": "}{", "n": {"m": "\\"}"}}', "{}"
    new = f"[TOOL_CALLS]get_weather[ARGS]{first}[TOOL_CALLS]now[ARGS]{second}"
    old = (
        f'[TOOL_CALLS][{{"name": "get_weather", "arguments": {first}}}, '
        f'{{"name": "now", "arguments": {second}}}]'
    )
    expected = [Call("get_weather", first), Call("now", second)]
    assert read_at_every_split(new) == expected
    assert read_at_every_split(old) == expected


def test_command_r_names_the_function_tool_name():
    text = '{"tool_call_id": "0", "name": "not it", "tool_name": "now", "parameters": {"a": 1}}'
    assert read_at_every_split(text, ("tool_name",)) == [Call("now", '{"a": 1}')]


def test_arguments_given_as_a_json_string_are_decoded():
    text = r'{"name": "search", "arguments": "{\"q\": \"a \\\"b\\\" {c}\"}"}'
    assert read_at_every_split(text) == [Call("search", r'{"q": "a \"b\" {c}"}')]


def test_no_arguments_are_an_empty_object():
    assert read_at_every_split('{"name": "now"}') == [Call("now", "{}")]
    assert read_at_every_split('{"name": "now", "arguments": {}}') == [Call("now", "{}")]


def test_arguments_that_are_not_an_object_end_invalid():
    assert read_at_every_split('{"name": "f", "arguments": [1, 2]}') == [
        Call("f", "[1, 2]", valid=False)
    ]
    assert read_at_every_split('{"name": "f", "arguments": 42, "id": 1}') == [
        Call("f", "42", valid=False)
    ]


def test_a_call_cut_off_ends_with_what_it_has():
    text = '{"name": "get_weather", "arguments": {"city": "Par'
    assert read_at_every_split(text) == [Call("get_weather", '{"city": "Par', valid=False)]
    cut_in_escape = '{"name": "f", "arguments": {"s": "a\\'
    assert read_at_every_split(cut_in_escape) == [Call("f", '{"s": "a\\', valid=False)]


def test_a_call_cut_off_before_its_name_says_nothing():
    assert read_at_every_split('{"arguments": {"x": 1}, "name": "get_wea') == []
    complete = f'{{"name": "get_weather", "arguments": {WEATHER}}}'
    assert read_at_every_split(complete + '; {"name": "n') == [Call("get_weather", WEATHER)]


def test_a_second_call_cut_off_after_a_whole_one():
    text = (
        f'{{"name": "get_weather", "parameters": {WEATHER}}}; {{"name": "now", "parameters": {{"z'
    )
    assert read_at_every_split(text) == [
        Call("get_weather", WEATHER),
        Call("now", '{"z', valid=False),
    ]


def test_garbage_after_a_call_adds_nothing():
    text = (
        f'<tool_call>\n{{"name": "get_weather", "arguments": {WEATHER}}}\n</tool_call>'
        ' }]] "stray" : , text {not json "name": and {"arguments": {"x": 1}}'
    )
    assert read_at_every_split(text) == [Call("get_weather", WEATHER)]


def test_an_object_without_a_name_before_a_call_takes_no_index():
    text = f'{{"thought": {{"a": "}}"}}}} {{"name": "get_weather", "arguments": {WEATHER}}}'
    events = scan([text])
    assert [e.index for e in events] == [0, 0, 0]
    assert read_at_every_split(text) == [Call("get_weather", WEATHER)]


def test_arguments_stream_before_the_call_closes():
    scanner = CallScanner()
    assert scanner.feed('{"name": "get_wea') == [] and not scanner.started_any
    assert scanner.feed('ther", "arguments": ') == [CallEvent("start", 0, "get_weather")]
    assert scanner.started_any
    assert scanner.feed('{"city": "Pa') == [
        CallEvent("arguments", 0, "get_weather", '{"city": "Pa')
    ]
    assert scanner.feed('ris"}}') == [
        CallEvent("arguments", 0, "get_weather", 'ris"}'),
        CallEvent("end", 0, "get_weather", '{"city": "Paris"}', True),
    ]
    assert scanner.finish() == []


@pytest.mark.parametrize("cut", range(1, len(WEATHER)))
def test_what_is_handed_on_is_always_a_prefix_of_the_arguments(cut):
    scanner = CallScanner()
    events = scanner.feed(f'{{"name": "get_weather", "arguments": {WEATHER[:cut]}')
    handed = "".join(e.text for e in events if e.kind == "arguments")
    assert handed == WEATHER[:cut]
