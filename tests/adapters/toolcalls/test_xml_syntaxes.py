"""The tag-delimited syntaxes (Qwen3-Coder XML parameters, GLM arg_key/arg_value, MiniMax
invoke): read at every split as the models write them (texts after llama.cpp's
tests/test-chat.cpp and the models' templates), typed by the schema, tolerant of the closing
tags models leave out, and their forced calls' grammars."""

import json

import pytest

from inference.adapters.toolcalls import Function, syntax_class
from inference.adapters.toolcalls.glm import GLMSyntax
from inference.adapters.toolcalls.minimax import MiniMaxSyntax
from inference.adapters.toolcalls.xml_parameters import QwenXMLSyntax
from inference.serving.structured import closed_objects
from tests.adapters.toolcalls.harness import (
    WEATHER_SCHEMA,
    grammar_accepts,
    stream_at_every_split,
)

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

PARIS = ("get_weather", {"city": "Paris", "days": 3, "metric": True})
NOW = ("now", {})
CODE = "if a < b:\n    s = '</param'  # not the close\n    t = '<parameter'\n"
SCHEMAS = {"get_weather": WEATHER_SCHEMA, "now": {"type": "object", "properties": {}}}
FUNCTIONS = [
    Function("get_weather", closed_objects(WEATHER_SCHEMA)),
    Function("now", closed_objects(SCHEMAS["now"])),
]


def qwen(name: str, **values: str) -> str:
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in values.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def glm46(name: str, **values: str) -> str:
    pairs = "".join(
        f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in values.items()
    )
    return f"<tool_call>{name}\n{pairs}</tool_call>"


def glm47(name: str, **values: str) -> str:
    pairs = "".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in values.items())
    return f"<tool_call>{name}{pairs}</tool_call>"


def invoke(name: str, **values: str) -> str:
    params = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in values.items())
    return f'<invoke name="{name}">\n{params}</invoke>\n'


def minimax(*invokes: str) -> str:
    return "<minimax:tool_call>\n" + "".join(invokes) + "</minimax:tool_call>"


WEATHER = {"city": "Paris", "days": "3", "metric": "true"}


@pytest.mark.parametrize(
    ("syntax", "text", "content", "calls"),
    [
        # Qwen3-Coder / Qwen3.5 / Nemotron 3 Nano
        ("qwen3_xml", qwen("get_weather", **WEATHER), None, [PARIS]),
        ("qwen3_xml", "Let me check.\n" + qwen("get_weather", **WEATHER), "Let me check.", [PARIS]),
        ("qwen3_xml", qwen("get_weather", **WEATHER) + "\n" + qwen("now"), None, [PARIS, NOW]),
        ("qwen3_xml", qwen("get_weather", city=CODE), None, [("get_weather", {"city": CODE})]),
        # Python's True as Qwen3-Coder's template writes a bool (`| string`)
        (
            "qwen3_xml",
            qwen("get_weather", city="Paris", metric="True"),
            None,
            [("get_weather", {"city": "Paris", "metric": True})],
        ),
        # no <tool_call> before the first <function= (llama.cpp accepts it for Qwen3-Coder)
        (
            "qwen3_xml",
            "Let me call it.\n" + qwen("get_weather", **WEATHER).removeprefix("<tool_call>\n"),
            "Let me call it.",
            [PARIS],
        ),
        # closes left out: </parameter> before the next parameter and </function>, and
        # </tool_call> at the end (the stop token ended the reply)
        (
            "qwen3_xml",
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
            "<parameter=days>\n3\n</function>\n",
            None,
            [("get_weather", {"city": "Paris", "days": 3})],
        ),
        # a Hermes JSON body inside <tool_call> (some Qwen3.5 quants), then an XML call
        (
            "qwen3_xml",
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, '
            '"metric": true}}\n</tool_call>\n' + qwen("now"),
            None,
            [PARIS, NOW],
        ),
        # GLM-4.6 (newlines) and GLM-4.7 (none)
        ("glm", glm46("get_weather", **WEATHER), None, [PARIS]),
        ("glm", glm47("get_weather", **WEATHER), None, [PARIS]),
        (
            "glm",
            "Checking." + glm47("get_weather", **WEATHER) + glm47("now"),
            "Checking.",
            [
                PARIS,
                NOW,
            ],
        ),
        ("glm", "\n" + glm46("get_weather", **WEATHER) + "\n" + glm46("now"), None, [PARIS, NOW]),
        ("glm", glm46("get_weather", city=CODE), None, [("get_weather", {"city": CODE})]),
        # </arg_value> left out before the next key and before </tool_call>
        (
            "glm",
            "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris"
            "<arg_key>days</arg_key><arg_value>3</tool_call>",
            None,
            [("get_weather", {"city": "Paris", "days": 3})],
        ),
        # MiniMax M2: one block, parallel calls as several invokes
        ("minimax", minimax(invoke("get_weather", **WEATHER)), None, [PARIS]),
        (
            "minimax",
            "Let's call a tool:\n\n" + minimax(invoke("get_weather", **WEATHER), invoke("now")),
            "Let's call a tool:",
            [PARIS, NOW],
        ),
        (
            "minimax",
            minimax(invoke("get_weather", city=CODE)),
            None,
            [("get_weather", {"city": CODE})],
        ),
        # </parameter> left out before the next parameter and </invoke>; no block end
        (
            "minimax",
            '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris'
            '<parameter name="days">3</invoke>\n',
            None,
            [("get_weather", {"city": "Paris", "days": 3})],
        ),
    ],
)
def test_read_at_every_split(syntax, text, content, calls):
    assert stream_at_every_split(syntax, text) == (content, calls)


def test_qwen_values_keep_their_own_newlines():
    """Only the newline on each side that the format adds is the format's (llama.cpp's
    regression case: a file ending in a newline)."""
    text = qwen("get_weather", city="\n    indented\n")
    assert stream_at_every_split("qwen3_xml", text) == (
        None,
        [("get_weather", {"city": "\n    indented\n"})],
    )


def _events(syntax_cls, text: str, piece: int = 1):
    syntax = syntax_cls(SCHEMAS)
    events = [e for i in range(0, len(text), piece) for e in syntax.feed(text[i : i + piece])]
    return syntax, events, syntax.finish()


@pytest.mark.parametrize(
    ("syntax_cls", "text"),
    [
        (QwenXMLSyntax, "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar"),
        (GLMSyntax, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Par"),
        (
            MiniMaxSyntax,
            '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Par',
        ),
    ],
)
def test_cut_inside_a_value_ends_invalid(syntax_cls, text):
    syntax, events, tail = _events(syntax_cls, text)
    assert syntax.started_any
    end = tail[-1]
    assert (end.kind, end.name, end.valid) == ("end", "get_weather", False)
    pieces = [e.text for e in events + tail if e.kind == "arguments"]
    assert "".join(pieces) == end.text
    assert json.loads(end.text) == {"city": "Par"}


@pytest.mark.parametrize(
    ("syntax_cls", "text"),
    [
        (
            QwenXMLSyntax,
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n",
        ),
        (GLMSyntax, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"),
        (
            MiniMaxSyntax,
            '<minimax:tool_call>\n<invoke name="get_weather">\n'
            '<parameter name="city">Paris</parameter>\n',
        ),
    ],
)
def test_cut_between_parameters_ends_valid(syntax_cls, text):
    _, _, tail = _events(syntax_cls, text)
    assert [(e.kind, e.valid) for e in tail][-1] == ("end", True)
    assert json.loads(tail[-1].text) == {"city": "Paris"}


@pytest.mark.parametrize(
    ("syntax_cls", "text", "before_close"),
    [
        (QwenXMLSyntax, qwen("get_weather", city="Paris is lovely"), "</parameter>"),
        (GLMSyntax, glm47("get_weather", city="Paris is lovely"), "</arg_value>"),
        (MiniMaxSyntax, minimax(invoke("get_weather", city="Paris is lovely")), "</parameter>"),
    ],
)
def test_events_stream_as_they_arrive(syntax_cls, text, before_close):
    """The call starts once its name is whole, and a string's text is handed on before its
    value closes."""
    syntax = syntax_cls(SCHEMAS)
    name_end = text.index("get_weather") + len("get_weather") + 2  # past the name's end
    assert [e.kind for e in syntax.feed(text[:name_end])] == ["start"]
    value = "".join(e.text for e in syntax.feed(text[name_end : text.index(before_close)]))
    assert value == '{"city": "Paris is lovely'


def test_text_that_never_names_a_call_is_not_a_call():
    for cls, text in [
        (QwenXMLSyntax, "<tool_call>\n<function=get_wea"),
        (GLMSyntax, "<tool_call>get_wea"),
        (MiniMaxSyntax, '<minimax:tool_call>\n<invoke name="get'),
    ]:
        syntax, events, tail = _events(cls, text)
        assert events == [] and tail == [] and not syntax.started_any


QWEN_FORCED = qwen("get_weather", city=CODE, days="3", metric="true")
GLM46_FORCED = glm46("get_weather", city=CODE, days="3")
GLM47_FORCED = glm47("get_weather", city="Paris", metric="false")
MINIMAX_FORCED = minimax(invoke("get_weather", city=CODE, days="3"))


@pytest.mark.parametrize(
    ("syntax", "text"),
    [
        ("qwen3_xml", QWEN_FORCED),
        ("qwen3_xml", qwen("get_weather", city="Paris")),
        ("glm", GLM46_FORCED),
        ("glm", GLM47_FORCED),
        ("minimax", MINIMAX_FORCED),
    ],
)
def test_forced_grammar_writes_the_syntax(hf_tokenizer, syntax, text):
    assert grammar_accepts(hf_tokenizer, syntax, text)
    assert not grammar_accepts(hf_tokenizer, syntax, text.replace("get_weather", "get_weathers"))


@pytest.mark.parametrize(
    ("syntax", "text"),
    [
        # a required parameter left out
        ("qwen3_xml", qwen("get_weather", days="3")),
        ("glm", glm47("get_weather", days="3")),
        ("minimax", minimax(invoke("get_weather", days="3"))),
        # an integer written as words
        ("qwen3_xml", qwen("get_weather", city="Paris", days="three")),
        ("glm", glm47("get_weather", city="Paris", days="three")),
        ("minimax", minimax(invoke("get_weather", city="Paris", days="three"))),
        # a parameter the schema does not have
        ("qwen3_xml", qwen("get_weather", city="Paris", country="FR")),
        # the string value closed, then more text in it (the close ends it)
        ("qwen3_xml", QWEN_FORCED.replace("if a", "a\n</parameter>\nb")),
        ("glm", GLM47_FORCED.replace("Paris", "a</arg_value>b")),
        ("minimax", MINIMAX_FORCED.replace("if a", "a</parameter>b")),
    ],
)
def test_forced_grammar_refuses(hf_tokenizer, syntax, text):
    assert not grammar_accepts(hf_tokenizer, syntax, text)


@pytest.mark.parametrize(
    ("syntax", "text"),
    [
        ("qwen3_xml", qwen("get_weather", city="Paris") + "\n" + qwen("now")),
        ("glm", glm46("get_weather", city="Paris") + "\n" + glm46("now")),
        ("minimax", minimax(invoke("get_weather", city="Paris"), invoke("now"))),
    ],
)
def test_required_grammar_takes_several_calls(hf_tokenizer, syntax, text):
    assert grammar_accepts(hf_tokenizer, syntax, text, FUNCTIONS, parallel=True)
    assert not grammar_accepts(hf_tokenizer, syntax, text, FUNCTIONS, parallel=False)


@pytest.mark.parametrize("syntax", ["qwen3_xml", "glm", "minimax"])
def test_registry_names_the_class(syntax):
    assert syntax_class(syntax).name == syntax


@pytest.mark.parametrize(
    ("template", "syntax", "marker", "turn_end"),
    [
        ("Qwen3-Coder.jinja", "qwen3_xml", "<tool_call>", "<|im_end|>"),
        ("Qwen3.5-4B.jinja", "qwen3_xml", "<tool_call>", "<|im_end|>"),
        ("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", "qwen3_xml", "<tool_call>", "<|im_end|>"),
        ("GLM-4.6.jinja", "glm", "<tool_call>", "<|user|>"),
        ("GLM-4.7-Flash.jinja", "glm", "<tool_call>", "<|user|>"),
        ("MiniMax-M2.jinja", "minimax", "<minimax:tool_call>", "[e~["),
    ],
)
def test_reads_what_the_models_template_writes(
    hf_tokenizer, llama_cpp_tree, template, syntax, marker, turn_end
):
    """Two calls in a past assistant turn, as the family's own chat template writes them
    (Qwen3-Coder writes a bool as Python's `True`), read back as those calls."""
    calls = [
        {"type": "function", "function": {"name": name, "arguments": args}}
        for name, args in (PARIS, NOW)
    ]
    messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        {"role": "user", "content": "Thanks"},
    ]
    source = (llama_cpp_tree / "models" / "templates" / template).read_text()
    rendered = hf_tokenizer.apply_chat_template(messages, chat_template=source, tokenize=False)
    turn = rendered[rendered.index("Weather?") :]
    turn = turn[turn.index(marker) : turn.index(turn_end, turn.index(marker))]
    assert stream_at_every_split(syntax, turn) == (None, [PARIS, NOW])


UNITS = {
    "type": "object",
    "properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["unit"],
}


@pytest.mark.parametrize(
    ("syntax", "write"),
    [
        ("qwen3_xml", lambda unit: qwen("convert", unit=unit)),
        ("glm", lambda unit: glm47("convert", unit=unit)),
        ("minimax", lambda unit: minimax(invoke("convert", unit=unit))),
    ],
)
def test_a_string_with_choices_takes_only_those(hf_tokenizer, syntax, write):
    # Written as raw text between tags, a string still keeps its schema's enum (a model on
    # free text would write anything there).
    functions = [Function("convert", closed_objects(UNITS))]
    assert grammar_accepts(hf_tokenizer, syntax, write("celsius"), functions)
    assert not grammar_accepts(hf_tokenizer, syntax, write("kelvin"), functions)
    assert not grammar_accepts(hf_tokenizer, syntax, write("celsius degrees"), functions)
