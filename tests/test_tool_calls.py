"""Tool-call parsing per family, streaming hold-back, and prompting with tools."""

import json
from pathlib import Path

import pytest

from inference.adapters import FamilyProfile, get_adapter
from inference.adapters.tools import ParsedCall, parse_hermes, parse_llama3, parse_mistral
from inference.protocol.openai.chat import ChatCompletionRequest
from inference.serving.tool_calls import StreamedReply, split_reply

WEATHER = ParsedCall("get_weather", '{"city": "Paris"}')


@pytest.mark.parametrize(
    ("parse", "text", "content", "calls"),
    [
        (
            parse_hermes,
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
            None,
            [WEATHER],
        ),
        (
            parse_hermes,
            'Let me look.\n<tool_call>{"name": "get_weather", "arguments": '
            '{"city": "Paris"}}</tool_call><tool_call>{"name": "now", "arguments": {}}</tool_call>',
            "Let me look.",
            [WEATHER, ParsedCall("now", "{}")],
        ),
        (
            parse_hermes,
            '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}',
            None,
            [WEATHER],
        ),  # unterminated, string arguments
        (parse_llama3, '{"name": "get_weather", "parameters": {"city": "Paris"}}', None, [WEATHER]),
        (
            parse_llama3,
            '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; '
            '{"name": "now", "parameters": {}}',
            None,
            [WEATHER, ParsedCall("now", "{}")],
        ),
        (
            parse_mistral,
            '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]',
            None,
            [WEATHER],
        ),
        (parse_mistral, 'Sure.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', "Sure.", [WEATHER]),
    ],
)
def test_parsers(parse, text, content, calls):
    parsed = parse(text)
    assert parsed is not None
    assert parsed.content == content
    assert [(c.name, json.loads(c.arguments)) for c in parsed.calls] == [
        (c.name, json.loads(c.arguments)) for c in calls
    ]


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        (parse_hermes, "No tools here."),
        (parse_hermes, "<tool_call>{not json}</tool_call>"),
        (parse_llama3, "The answer is {42}."),
        (parse_llama3, '{"no_name": 1}'),
        (parse_mistral, "[TOOL_CALLS] garbage"),
    ],
)
def test_parsers_leave_plain_text_alone(parse, text):
    assert parse(text) is None


def test_adapter_falls_back_to_hermes_and_then_to_text():
    llama = get_adapter(FamilyProfile(adapter="llama3"))
    hermes = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    assert llama.parse_tool_calls(hermes).calls == (WEATHER,)
    assert llama.parse_tool_calls("Just words.").content == "Just words."
    assert llama.parse_tool_calls("Just words.").calls == ()


def request(**extra) -> ChatCompletionRequest:
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}
    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [tool], **extra}
    )


def stream(reply: StreamedReply, pieces: list[str]) -> tuple[str, list]:
    sent = "".join(reply.feed(p) for p in pieces)
    tail, calls = reply.finish()
    return sent + tail, calls


def test_stream_sends_content_then_holds_the_tool_call():
    reply = StreamedReply(request(), get_adapter(FamilyProfile(adapter="chatml")))
    pieces = [
        "Checking",
        " now.",
        "<tool",
        '_call>{"name": "get_weather", ',
        '"arguments": {}}',
        "</tool_call>",
    ]
    sent = [reply.feed(p) for p in pieces]
    assert "".join(sent) == "Checking now."
    tail, calls = reply.finish()
    assert tail == ""
    assert [c.function.name for c in calls] == ["get_weather"]


def test_stream_releases_a_false_alarm():
    reply = StreamedReply(request(), get_adapter(FamilyProfile(adapter="chatml")))
    text, calls = stream(reply, ["a <tool", "_call> that never closes {"])
    assert text == "a <tool_call> that never closes {"
    assert calls == []


def test_llama3_stream_holds_a_reply_that_opens_with_json():
    adapter = get_adapter(FamilyProfile(adapter="llama3"))
    reply = StreamedReply(request(), adapter)
    assert reply.feed("  ") == ""
    assert reply.feed('{"name": "get_weather", ') == ""
    text, calls = stream(reply, ['"parameters": {"city": "Paris"}}'])
    assert text == ""
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    plain = StreamedReply(request(), adapter)
    assert stream(plain, [" ", "Hello {there}"]) == (" Hello {there}", [])


def test_tool_choice_none_streams_everything():
    reply = StreamedReply(request(tool_choice="none"), get_adapter(FamilyProfile()))
    assert stream(reply, ["<tool_call>", "{}"]) == ("<tool_call>{}", [])


def test_forced_call_is_split_from_json():
    named = request(tool_choice={"type": "function", "function": {"name": "get_weather"}})
    reply = split_reply(named, get_adapter(FamilyProfile()), '{"city": "Paris"}')
    assert reply.content is None
    assert reply.tool_calls[0].function.name == "get_weather"
    required = request(tool_choice="required")
    text = '[{"name": "get_weather", "parameters": {"city": "Paris"}}]'
    (call,) = split_reply(required, get_adapter(FamilyProfile()), text).tool_calls
    assert call.function.arguments == '{"city": "Paris"}'


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
HISTORY = [
    {"role": "user", "content": "Weather?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "content": "22C", "tool_call_id": "call_1"},
]


@pytest.fixture(scope="module")
def hf_tokenizer(smollm_dir: Path):
    from mlx_lm.tokenizer_utils import load as load_tokenizer

    return load_tokenizer(smollm_dir)


def test_template_without_tools_gets_them_in_a_system_message(hf_tokenizer):
    adapter = get_adapter(FamilyProfile(adapter="chatml"))
    text = hf_tokenizer.decode(adapter.render_prompt(hf_tokenizer, HISTORY, TOOLS))
    assert "<tools>" in text and '"get_weather"' in text
    assert (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    )
    assert "<tool_response>\n22C\n</tool_response>" in text
    assert text.rstrip().endswith("<|im_start|>assistant")


def test_template_with_tools_receives_them_natively(hf_tokenizer):
    template = (
        "{% for t in tools %}TOOL:{{ t.function.name }}\n{% endfor %}"
        "{% for m in messages %}{{ m.role }}:{{ m.content }}"
        "{% for c in m.tool_calls or [] %}"
        "CALL:{{ c.function.name }}({{ c.function.arguments.city }}){% endfor %}\n"
        "{% endfor %}assistant:"
    )
    adapter = get_adapter(FamilyProfile(adapter="chatml", chat_template=template))
    text = hf_tokenizer.decode(adapter.render_prompt(hf_tokenizer, HISTORY, TOOLS))
    assert text.startswith("TOOL:get_weather\n")
    assert "CALL:get_weather(Paris)" in text  # arguments arrive as an object
    assert "<tools>" not in text
