"""Tool calls per family, streamed as they are written; reasoning split out; prompting with
tools."""

import json
from pathlib import Path

import pytest

from inference.adapters import FamilyProfile, get_adapter
from inference.serving.reply import (
    ReasoningDelta,
    ReplyParser,
    TextDelta,
    ToolArgumentsDelta,
    ToolCallEnd,
    ToolCallStart,
    parse_reply,
)
from inference.serving.thinking import Thinking
from inference.serving.tooluse import FunctionTool, ToolUse

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

WEATHER = ("get_weather", {"city": "Paris"})
NOW = ("now", {})
OFFERED = ToolUse((FunctionTool("get_weather"), FunctionTool("now")))
THINK = Thinking("<think>", "</think>", opened=False)


def adapter(name: str = "chatml"):
    return get_adapter(FamilyProfile(adapter=name))


def calls_of(reply) -> list[tuple[str, object]]:
    return [(c.name, json.loads(c.arguments)) for c in reply.tool_calls]


@pytest.mark.parametrize(
    ("family", "text", "content", "calls"),
    [
        (
            "chatml",
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
            None,
            [WEATHER],
        ),
        (
            "chatml",
            'Let me look.\n<tool_call>{"name": "get_weather", "arguments": '
            '{"city": "Paris"}}</tool_call><tool_call>{"name": "now", "arguments": {}}</tool_call>',
            "Let me look.",
            [WEATHER, NOW],
        ),
        (
            "chatml",
            '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}',
            None,
            [WEATHER],
        ),  # unterminated, string arguments
        ("llama3", '{"name": "get_weather", "parameters": {"city": "Paris"}}', None, [WEATHER]),
        (
            "llama3",
            '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; '
            '{"name": "now", "parameters": {}}',
            None,
            [WEATHER, NOW],
        ),
        (
            "llama3",
            '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
            None,
            [WEATHER],
        ),  # Llama fine-tunes that learned Hermes
        (
            "mistral",
            '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]',
            None,
            [WEATHER],
        ),
        ("mistral", 'Sure.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', "Sure.", [WEATHER]),
        (
            "mistral",
            '[TOOL_CALLS]get_weather[ARGS]{"name": "x"}[TOOL_CALLS]now[ARGS]{}',
            None,
            [("get_weather", {"name": "x"}), NOW],
        ),  # an argument called "name" is not the function's name
    ],
)
@pytest.mark.parametrize("piece", [1, 2, 7, 1000])
def test_calls_per_family_at_any_split(family, text, content, calls, piece):
    parser = ReplyParser(adapter(family), OFFERED)
    events = []
    for i in range(0, len(text), piece):
        events += parser.feed(text[i : i + piece])
    events += parser.finish()
    reply = parser.reply()
    assert reply.content == content
    assert calls_of(reply) == calls
    for index, call in enumerate(reply.tool_calls):
        starts = [e for e in events if isinstance(e, ToolCallStart) and e.index == index]
        assert [(s.id, s.name) for s in starts] == [(call.id, call.name)]
        pieces = [e.text for e in events if isinstance(e, ToolArgumentsDelta) and e.index == index]
        assert "".join(pieces) == call.arguments  # the stream adds up to the final arguments
        own = [i for i, e in enumerate(events) if getattr(e, "index", -1) == index]
        assert events[own[0]] == starts[0]  # name and id first


def test_arguments_stream_while_they_are_written():
    parser = ReplyParser(adapter(), OFFERED)
    start, first = parser.feed('<tool_call>{"name": "get_weather", "arguments": {"ci')
    assert isinstance(start, ToolCallStart)
    assert (start.index, start.name, start.id[:5]) == (0, "get_weather", "call_")
    assert first == ToolArgumentsDelta(0, '{"ci')
    assert parser.feed('ty": "Par') == [ToolArgumentsDelta(0, 'ty": "Par')]
    assert parser.feed('is"}}</tool_call>') == [
        ToolArgumentsDelta(0, 'is"}'),
        ToolCallEnd(0, start.id, "get_weather", '{"city": "Paris"}', valid=True),
    ]


@pytest.mark.parametrize(
    ("family", "text"),
    [
        ("chatml", "No tools here."),
        ("chatml", "<tool_call>{not json}</tool_call>"),
        ("chatml", "a <tool_call> that never closes {"),
        ("llama3", "The answer is {42}."),
        ("llama3", '{"no_name": 1}'),
        ("llama3", " Hello {there}"),
        ("mistral", "[TOOL_CALLS] garbage"),
    ],
)
def test_text_that_only_looks_like_a_call_stays_text(family, text):
    reply = parse_reply(adapter(family), text, OFFERED)
    assert (reply.content, reply.tool_calls) == (text, [])


def test_content_streams_until_the_call_starts():
    parser = ReplyParser(adapter(), OFFERED)
    pieces = ["Checking", " now.", "<tool", '_call>{"name": "get_weather", ', '"arguments": {}}']
    texts = [e.text for p in pieces for e in parser.feed(p) if isinstance(e, TextDelta)]
    assert "".join(texts) == "Checking now."
    parser.finish()
    assert calls_of(parser.reply()) == [("get_weather", {})]


def test_tool_choice_none_streams_everything():
    reply = parse_reply(adapter(), '<tool_call>{"name": "now"}', ToolUse(OFFERED.tools, "none"))
    assert (reply.content, reply.tool_calls) == ('<tool_call>{"name": "now"}', [])


def test_forced_and_required_calls():
    """A forced or required reply is calls from its first character, in the family's syntax
    (its grammar writes them so): no marker needed, nothing taken for text."""
    forced = ToolUse(OFFERED.tools, forced="get_weather")
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert calls_of(parse_reply(adapter(), call, forced)) == [WEATHER]
    parser = ReplyParser(adapter(), forced)
    # The engine can send empty pieces (a token held back mid-character): one start all the same.
    events = [*parser.feed(""), *parser.feed(call[:30]), *parser.feed(""), *parser.feed(call[30:])]
    events += parser.finish()
    assert len([e for e in events if isinstance(e, ToolCallStart)]) == 1
    assert calls_of(parser.reply()) == [WEATHER]
    # Cut off before the name (max_tokens): the forced function is called with what there is.
    empty = parse_reply(adapter(), "<tool_call>", forced)
    assert [(c.name, c.arguments) for c in empty.tool_calls] == [("get_weather", "{}")]
    required = ToolUse(OFFERED.tools, "required")
    text = call + '\n<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>'
    assert calls_of(parse_reply(adapter(), text, required)) == [WEATHER, NOW]
    single = ToolUse(OFFERED.tools, "required", parallel=False)
    assert calls_of(parse_reply(adapter(), text, single)) == [WEATHER]
    llama = '{"name": "get_weather", "parameters": {"city": "Paris"}}; '
    llama += '{"name": "now", "parameters": {}}'
    assert calls_of(parse_reply(adapter("llama3"), llama, required)) == [WEATHER, NOW]


@pytest.mark.parametrize("piece", [1, 3, 1000])
def test_reasoning_then_a_call(piece):
    text = '<think>\nHmm, weather.\n</think>\n\nOn it.<tool_call>{"name": "now", "arguments": {}}'
    parser = ReplyParser(adapter(), OFFERED, THINK)
    events = [e for i in range(0, len(text), piece) for e in parser.feed(text[i : i + piece])]
    events += parser.finish()
    reply = parser.reply()
    assert reply.reasoning == "Hmm, weather."
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "Hmm, weather."
    assert reply.content == "On it."
    assert calls_of(reply) == [NOW]


@pytest.mark.parametrize(
    ("text", "opened", "reasoning", "content"),
    [
        ("<think>a</think>b", False, "a", "b"),
        ("  <think>\n a b \n</think>\n\n c", False, "a b", "c"),
        ("no thinking at all", False, None, "no thinking at all"),
        ("<thinking is a word", False, None, "<thinking is a word"),
        ("<think>cut off inside", False, "cut off inside", None),
        ("<think>cut off at the marker </thi", False, "cut off at the marker </thi", None),
        ("already inside</think>answer", True, "already inside", "answer"),
        ("inside, never closed", True, "inside, never closed", None),
        ("</think>answer only", True, None, "answer only"),
    ],
)
@pytest.mark.parametrize("piece", [1, 2, 5, 1000])
def test_reasoning_split_at_any_point(text, opened, reasoning, content, piece):
    parser = ReplyParser(adapter(), None, Thinking("<think>", "</think>", opened))
    events = [e for i in range(0, len(text), piece) for e in parser.feed(text[i : i + piece])]
    events += parser.finish()
    reply = parser.reply()
    assert (reply.reasoning, reply.content) == (reasoning, content)
    streamed = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    assert streamed == (reasoning or "")
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == (content or "")


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


def test_tool_history_without_tools_keeps_the_prompt_head_across_turns(hf_tokenizer):
    """No tools offered, calls in the history: they are inlined, and no (empty) function list
    joins the system prompt once the first call appears, so turn 2 extends turn 1's tokens."""
    adapter = get_adapter(FamilyProfile(adapter="chatml"))
    system = {"role": "system", "content": "You are an agent."}
    first = adapter.render_prompt(hf_tokenizer, [system, HISTORY[0]], None)
    second = adapter.render_prompt(hf_tokenizer, [system, *HISTORY], None)
    text = hf_tokenizer.decode(second)
    assert "<tools>" not in text and "<tool_response>\n22C\n</tool_response>" in text
    head = first[: len(first) - 3]  # less the generation prompt's tokens
    assert second[: len(head)] == head


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
