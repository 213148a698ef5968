"""The marker syntaxes (DeepSeek, Kimi, pythonic, Gemma 4): replies as the real models write
them (from their chat templates and llama.cpp's tests/test-chat.cpp), read at every split,
cut off midway, and their forced calls' grammars."""

import json
import re

import pytest

from inference.adapters.toolcalls import Function, syntax_class
from inference.adapters.toolcalls.deepseek import DeepSeekDSMLSyntax, DeepSeekV4Syntax
from inference.adapters.toolcalls.gemma4 import gemma_value
from inference.serving.structured import closed_objects
from tests.adapters.toolcalls.harness import (
    WEATHER_SCHEMA,
    grammar_accepts,
    stream_at_every_split,
)

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

PARIS = ("get_weather", {"city": "Paris", "days": 3})
NOW = ("now", {})
DS_CALLS, DS_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DS_CALL, DS_SEP, DS_END = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"
DSML = "｜DSML｜"


def ds_call(name: str, args: str) -> str:
    return f"{DS_CALL}{name}{DS_SEP}{args}{DS_END}"


def dsml(block: str, *invokes: str) -> str:
    return f"\n\n<{DSML}{block}>\n" + "".join(invokes) + f"</{DSML}{block}>"


def invoke(name: str, *params: tuple[str, str, str]) -> str:
    body = "".join(
        f'<{DSML}parameter name="{k}" string="{s}">{v}</{DSML}parameter>\n' for k, s, v in params
    )
    return f'<{DSML}invoke name="{name}">\n{body}</{DSML}invoke>\n'


def kimi_call(index: int, name: str, args: str) -> str:
    return (
        f"<|tool_call_begin|>functions.{name}:{index}<|tool_call_argument_begin|>{args}"
        "<|tool_call_end|>"
    )


def k3_call(index: int, name: str, *args: tuple[str, str, str]) -> str:
    body = "".join(
        f'<|open|>argument key="{k}" type="{t}"<|sep|>{v}<|close|>argument<|sep|>'
        for k, t, v in args
    )
    return f'<|open|>call tool="{name}" index="{index}"<|sep|>{body}<|close|>call<|sep|>'


def gemma_call(name: str, args: str) -> str:
    return f"<|tool_call>call:{name}{{{args}}}<tool_call|>"


Q = '<|"|>'
DS_TWO = DS_CALLS + ds_call("get_weather", '{"city": "Paris", "days": 3}') + ds_call("now", "{}")
KIMI_TWO = (
    "<|tool_calls_section_begin|>"
    + kimi_call(0, "get_weather", '{"city": "Paris", "days": 3}')
    + kimi_call(1, "now", "{}")
    + "<|tool_calls_section_end|>"
)
K3_TWO = (
    "<|open|>tools<|sep|>"
    + k3_call(1, "get_weather", ("city", "string", "Paris"), ("days", "number", "3"))
    + k3_call(2, "now")
    + "<|close|>tools<|sep|><|close|>message<|sep|>"
)


@pytest.mark.parametrize(
    ("syntax", "text", "content", "calls"),
    [
        # DeepSeek V3.1: content, then two calls.
        ("deepseek", "Let me look." + DS_TWO + DS_CALLS_END, "Let me look.", [PARIS, NOW]),
        # Section markers around one call, JSON with nested braces and a brace in a string.
        (
            "deepseek",
            DS_CALLS + ds_call("get_weather", '{"city": "Pa}ris{", "days": 3}') + DS_CALLS_END,
            None,
            [("get_weather", {"city": "Pa}ris{", "days": 3})],
        ),
        # R1 / V3-0324: the type, the name on the next line, arguments in a ```json fence.
        (
            "deepseek",
            f"{DS_CALLS}{DS_CALL}function{DS_SEP}get_weather\n```json\n"
            f'{{"city": "Paris", "days": 3}}\n```{DS_END}{DS_CALLS_END}',
            None,
            [PARIS],
        ),
        # V3.2's DSML: strings as written, other values JSON (string="false").
        (
            "deepseek",
            "Checking."
            + dsml(
                "function_calls",
                invoke(
                    "get_weather",
                    ("city", "true", 'Paris "Left Bank" <3'),
                    ("days", "false", "3"),
                    ("metric", "false", "true"),
                ),
                invoke("now"),
            ),
            "Checking.",
            [("get_weather", {"city": 'Paris "Left Bank" <3', "days": 3, "metric": True}), NOW],
        ),
        # V4 names its block tool_calls.
        (
            "deepseek",
            dsml(
                "tool_calls",
                invoke("get_weather", ("city", "true", "Paris"), ("days", "false", "3")),
            ),
            None,
            [PARIS],
        ),
        # Kimi K2: content, two calls.
        ("kimi", "Hello, world!\nWhat's up?" + KIMI_TWO, "Hello, world!\nWhat's up?", [PARIS, NOW]),
        # K2-Thinking inside its thinking, without section or end markers (llama.cpp's test).
        (
            "kimi",
            "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
            '{"city": "Paris", "days": 3}'
            "<|tool_call_begin|>functions.now:1<|tool_call_argument_begin|>{}",
            None,
            [PARIS, NOW],
        ),
        # An id without the functions. prefix; a string holding a marker-like text.
        (
            "kimi",
            "<|tool_calls_section_begin|>"
            + kimi_call(0, "get_weather", '{"city": "<|tool_call_end|>"}').replace("functions.", "")
            + "<|tool_calls_section_end|>",
            None,
            [("get_weather", {"city": "<|tool_call_end|>"})],
        ),
        # Kimi K3's XTML tools section.
        ("kimi", K3_TWO, None, [PARIS, NOW]),
        # K3 with one JSON block for the arguments.
        (
            "kimi",
            '<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|>'
            '<|open|>json type="object"<|sep|>{"city": "Paris", "days": 3}<|close|>json<|sep|>'
            "<|close|>call<|sep|><|close|>tools<|sep|>",
            None,
            [PARIS],
        ),
        # Pythonic: the whole reply, both quotes, escapes, Python literals typed as written.
        (
            "pythonic",
            "[get_weather(city='Pa\\'ris\\n', days=3, metric=True), now()]",
            None,
            [("get_weather", {"city": "Pa'ris\n", "days": 3, "metric": True}), NOW],
        ),
        (
            "pythonic",
            '[get_weather(city="Paris", days=3)]',
            None,
            [PARIS],
        ),
        # Llama 4's python tags, after content.
        (
            "pythonic",
            'Let me check.<|python_start|>[get_weather(city="Paris", days=3)]<|python_end|>',
            "Let me check.",
            [PARIS],
        ),
        # LFM2's tags; lists, dicts, None and a tuple as values; a string day stays a string.
        (
            "pythonic",
            "<|tool_call_start|>[get_weather(city=\"Paris\", days='3', metric=None, "
            "extra={'a': [1, (2, 3)], \"b\": False}), now()]<|tool_call_end|>",
            None,
            [
                (
                    "get_weather",
                    {
                        "city": "Paris",
                        "days": "3",
                        "metric": None,
                        "extra": {"a": [1, [2, 3]], "b": False},
                    },
                ),
                NOW,
            ],
        ),
        # Gemma 4: content, two calls; types as the template writes them.
        (
            "gemma4",
            "Hello, world!\nWhat's up?"
            + gemma_call("get_weather", f"city:{Q}Paris, {{FR}}{Q},days:3,metric:true")
            + gemma_call("now", ""),
            "Hello, world!\nWhat's up?",
            [("get_weather", {"city": "Paris, {FR}", "days": 3, "metric": True}), NOW],
        ),
        # Nested values: a list of strings, an object with bare and quoted keys, null, floats.
        (
            "gemma4",
            gemma_call(
                "get_weather",
                f"city:{Q}Paris{Q},extra:{{a:[{Q}x,y{Q},{Q}z]{Q}],{Q}b{Q}:{{c:null}},d:-1.5e3}}",
            ),
            None,
            [
                (
                    "get_weather",
                    {
                        "city": "Paris",
                        "extra": {"a": ["x,y", "z]"], "b": {"c": None}, "d": -1500.0},
                    },
                )
            ],
        ),
    ],
)
def test_read_at_every_split(syntax, text, content, calls):
    assert stream_at_every_split(syntax, text) == (content, calls)


@pytest.mark.parametrize(
    "text",
    [
        "[1, 2, 3]",
        "[Link](https://example.com) says hi",
        "[get_weather is what I would call](x)",
        "[unknown_tool(x=1)]",
        "[]",
        "[now(1)]",  # a positional argument: no keyword call
    ],
)
def test_pythonic_false_alarms_are_text(text):
    content, calls = stream_at_every_split("pythonic", text)
    assert (content, calls) == (text, [])


def events_of(syntax: str, text: str, piece: int = 3):
    reader = syntax_class(syntax)({"get_weather": WEATHER_SCHEMA, "now": {}})
    events = [e for i in range(0, len(text), piece) for e in reader.feed(text[i : i + piece])]
    return reader, events + reader.finish()


@pytest.mark.parametrize(
    ("syntax", "text", "arguments"),
    [
        ("deepseek", DS_CALLS + f'{DS_CALL}get_weather{DS_SEP}{{"city": "Par', '{"city": "Par'),
        (
            "deepseek",
            dsml("function_calls", invoke("get_weather", ("city", "true", "Paris")))[:-60],
            '{"city": "Par"}',
        ),
        (
            "kimi",
            '<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": ',
            '{"city": ',
        ),
        (
            "kimi",
            '<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|>'
            '<|open|>argument key="city" type="string"<|sep|>Pa',
            '{"city": "Pa"}',
        ),
        ("pythonic", '[get_weather(city="Paris", days=3', '{"city": "Paris", "days": 3}'),
        ("pythonic", "[get_weather(city='Pa", '{"city": "Pa"}'),
        ("gemma4", f"<|tool_call>call:get_weather{{city:{Q}Par", '{"city": "Par"}'),
        (
            "gemma4",
            f"<|tool_call>call:get_weather{{city:{Q}P{Q},days:1",
            '{"city": "P", "days": 1}',
        ),
    ],
)
def test_a_call_cut_off_ends_invalid_with_what_it_has(syntax, text, arguments):
    reader, events = events_of(syntax, text)
    assert reader.started_any
    assert [e.kind for e in events if e.kind != "arguments"] == ["start", "end"]
    end = events[-1]
    assert (end.name, end.text, end.valid) == ("get_weather", arguments, False)
    assert "".join(e.text for e in events if e.kind == "arguments") == end.text


@pytest.mark.parametrize(
    ("syntax", "text"),
    [
        ("deepseek", DS_TWO + DS_CALLS_END),
        ("kimi", KIMI_TWO),
        ("kimi", K3_TWO),
        ("pythonic", "[get_weather(city='Paris', days=3), now()]"),
        ("gemma4", gemma_call("get_weather", f"city:{Q}Paris{Q},days:3") + gemma_call("now", "")),
    ],
)
def test_arguments_stream_before_the_call_ends(syntax, text):
    """The start comes once the name is read, and the city's text before the call ends."""
    _, events = events_of(syntax, text, piece=1)
    kinds = [e.kind for e in events]
    first_end = kinds.index("end")
    city = [e.text for e in events[:first_end] if e.kind == "arguments"]
    assert kinds[0] == "start" and events[0].name == "get_weather"
    assert len(city) > 1 and json.loads("".join(city)) == {"city": "Paris", "days": 3}
    assert [(e.index, e.name) for e in events if e.kind == "end"] == [
        (0, "get_weather"),
        (1, "now"),
    ]
    assert all(e.valid for e in events if e.kind == "end")


def test_gemma_values_read_as_the_template_writes_them():
    assert gemma_value(f"[{Q}buy milk{Q},{Q}walk dog{Q}]") == ["buy milk", "walk dog"]
    assert gemma_value(f"{{theme:{Q}dark{Q},count:3}}") == {"theme": "dark", "count": 3}
    assert gemma_value("1.5e10") == 1.5e10 and gemma_value("{}") == {} and gemma_value("[]") == []
    with pytest.raises(ValueError):
        gemma_value("{a:")


WEATHER = Function("get_weather", closed_objects(WEATHER_SCHEMA))
NOW_FN = Function("now", closed_objects({"type": "object", "properties": {}}))


@pytest.mark.parametrize(
    ("syntax", "text"),
    [
        (
            "deepseek",
            DS_CALLS + ds_call("get_weather", '{"city": "Paris", "days": 3}') + DS_CALLS_END,
        ),
        (
            "kimi",
            "<|tool_calls_section_begin|>"
            + kimi_call(0, "get_weather", '{"city": "Paris"}')
            + "<|tool_calls_section_end|>",
        ),
        ("pythonic", '[get_weather(city="Paris", days=3, metric=True)]'),
        ("pythonic", '[get_weather(city="Paris", metric=False)]'),
        ("gemma4", gemma_call("get_weather", f"city:{Q}Paris <b>{Q},days:3,metric:true")),
        ("gemma4", gemma_call("get_weather", f"city:{Q}Paris{Q}")),
    ],
)
def test_forced_grammar_writes_the_syntax(hf_tokenizer, syntax, text):
    assert grammar_accepts(hf_tokenizer, syntax, text)
    assert not grammar_accepts(hf_tokenizer, syntax, text.replace("get_weather", "get_weathers"))
    # The schema holds: a required argument cannot be left out.
    missing = re.sub(r"city[^,)}]*(, |,)?", "", text, count=1)
    assert not grammar_accepts(hf_tokenizer, syntax, missing)


@pytest.mark.parametrize(
    ("syntax", "text"),
    [
        ("deepseek", DS_TWO + DS_CALLS_END),
        ("kimi", KIMI_TWO),
        ("pythonic", "[get_weather(city='Paris', days=3), now()]".replace("'", '"')),
        ("gemma4", gemma_call("get_weather", f"city:{Q}Paris{Q},days:3") + gemma_call("now", "")),
    ],
)
def test_required_grammar_takes_several_calls(hf_tokenizer, syntax, text):
    assert grammar_accepts(hf_tokenizer, syntax, text, [WEATHER, NOW_FN], parallel=True)
    assert not grammar_accepts(hf_tokenizer, syntax, text, [WEATHER, NOW_FN], parallel=False)


@pytest.mark.parametrize(
    ("cls", "block"), [(DeepSeekDSMLSyntax, "function_calls"), (DeepSeekV4Syntax, "tool_calls")]
)
def test_dsml_grammar_writes_dsml(hf_tokenizer, cls, block):
    import llguidance

    from inference.engine.constraints import ll_tokenizer_of
    from inference.serving.structured import checked_grammar

    text = dsml(
        block,
        invoke("get_weather", ("city", "true", "Paris <Left Bank>"), ("days", "false", "3")),
    ).lstrip()

    def accepts(candidate: str) -> bool:
        matcher = llguidance.LLMatcher(
            ll_tokenizer_of(hf_tokenizer),
            checked_grammar(cls().grammar([WEATHER], False), "tools"),
        )
        tokens = hf_tokenizer.encode(candidate, add_special_tokens=False)
        return all(matcher.consume_token(t) for t in tokens) and matcher.is_accepting()

    assert accepts(text)
    assert not accepts(text.replace("get_weather", "get_weathers"))
    # What DeepSeekSyntax reads back from it.
    assert stream_at_every_split("deepseek", text) == (
        None,
        [("get_weather", {"city": "Paris <Left Bank>", "days": 3})],
    )
