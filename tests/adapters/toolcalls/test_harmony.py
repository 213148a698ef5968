"""gpt-oss (harmony): replies read into reasoning, content and calls at every split, from the
family's reader and from plain content; the forced call's grammar with the format's special
tokens; the history the real template is given; reasoning_effort."""

import json

import pytest

from inference.adapters import FamilyProfile, get_adapter
from inference.adapters.harmony import HarmonyAdapter, HarmonyReader
from inference.adapters.toolcalls import Function
from inference.adapters.toolcalls.harmony import parse_header
from inference.serving.reply import (
    ReasoningDelta,
    ReplyParser,
    TextDelta,
    ToolArgumentsDelta,
    ToolCallEnd,
    ToolCallStart,
)
from inference.serving.structured import closed_objects
from inference.serving.thinking import plan_thinking
from inference.serving.tooluse import ToolUse
from tests.adapters.toolcalls.harness import (
    OFFERED,
    WEATHER_SCHEMA,
    grammar_accepts,
    stream_at_every_split,
)

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

HARMONY_TOKENS = [
    "<|start|>",
    "<|channel|>",
    "<|message|>",
    "<|constrain|>",
    "<|end|>",
    "<|call|>",
    "<|return|>",
]
PARIS = ("get_weather", {"city": "Paris", "days": 3})
PARIS_JSON = '{"city": "Paris", "days": 3}'
THINKING = "<|channel|>analysis<|message|>The user wants\nthe weather.<|end|>"
CALL_IN_CHANNEL = (
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    f"<|message|>{PARIS_JSON}"
)


def read_streamed(text: str, piece: int, tool_use: ToolUse = OFFERED):
    """gpt-oss's reply parser fed `text` in pieces of `piece` chars: (reasoning, content,
    [(name, arguments text, valid)]), checking the events' invariants on the way."""
    parser = ReplyParser(get_adapter(FamilyProfile(adapter="harmony")), tool_use)
    events = [e for i in range(0, len(text), piece) for e in parser.feed(text[i : i + piece])]
    events += parser.finish()
    ends = [e for e in events if isinstance(e, ToolCallEnd)]
    for end in ends:
        deltas = [
            e.text for e in events if isinstance(e, ToolArgumentsDelta) and e.index == end.index
        ]
        assert "".join(deltas) == end.arguments, piece
        starts = [e for e in events if isinstance(e, ToolCallStart) and e.index == end.index]
        assert len(starts) == 1 and starts[0].name == end.name
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    content = "".join(e.text for e in events if isinstance(e, TextDelta))
    for said in (reasoning, content):
        assert "<|" not in said and "to=functions" not in said, (piece, said)
    calls = [(e.name, e.arguments, e.valid) for e in ends]
    return reasoning or None, content.strip() or None, calls


def read_at_every_split(text: str, tool_use: ToolUse = OFFERED):
    results = {size: read_streamed(text, size, tool_use) for size in range(1, len(text) + 1)}
    whole = results[len(text)]
    for size, result in results.items():
        assert result == whole, f"split {size} gave {result}, whole gave {whole}"
    return whole


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            f"{THINKING}<|start|>assistant<|channel|>final<|message|>Sunny, 21 °C.",
            ("The user wants\nthe weather.", "Sunny, 21 °C.", []),
            id="reasoning-then-answer",
        ),
        pytest.param(
            "<|channel|>final<|message|>Sunny.",
            (None, "Sunny.", []),
            id="answer-only",
        ),
        pytest.param(
            "It is sunny in Paris.",
            (None, "It is sunny in Paris.", []),
            id="plain-text",
        ),
        pytest.param(
            THINKING + CALL_IN_CHANNEL,
            ("The user wants\nthe weather.", None, [("get_weather", PARIS_JSON, True)]),
            id="reasoning-then-call",
        ),
        pytest.param(
            f"{THINKING}<|start|>assistant<|channel|>commentary<|message|>Let me look that up."
            "<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json"
            f"<|message|>{PARIS_JSON}<|call|>",
            (
                "The user wants\nthe weather.",
                "Let me look that up.",
                [("get_weather", PARIS_JSON, True)],
            ),
            id="preamble-then-call-recipient-first",
        ),
        pytest.param(
            f" to=functions.get_weather<|channel|>commentary json<|message|>{PARIS_JSON}",
            (None, None, [("get_weather", PARIS_JSON, True)]),
            id="reply-opens-with-recipient",
        ),
        pytest.param(
            "<|channel|>analysis to=functions.now<|message|>{}",
            (None, None, [("now", "{}", True)]),
            id="call-on-analysis-channel",
        ),
        pytest.param(
            THINKING + CALL_IN_CHANNEL[: -len(' "days": 3}')],
            ("The user wants\nthe weather.", None, [("get_weather", '{"city": "Paris",', False)]),
            id="cut-off-call",
        ),
        pytest.param(
            "<|channel|>commentary to=assistant<|channel|>analysis<|message|>Hmm.<|end|>"
            "<|start|>assistant<|channel|>final<|message|>Done.",
            ("Hmm.", "Done.", []),
            id="stray-commentary-header",
        ),
        pytest.param(
            f"{THINKING}<|start|>assistant to=container.exec<|channel|>commentary<|message|>ls",
            ("The user wants\nthe weather.", None, []),
            id="built-in-tool-dropped",
        ),
        pytest.param(
            f"{CALL_IN_CHANNEL}<|end|><|start|>assistant to=functions.now<|channel|>commentary "
            "<|constrain|>json<|message|>{}",
            (None, None, [("get_weather", PARIS_JSON, True), ("now", "{}", True)]),
            id="two-calls",
        ),
    ],
)
def test_reader_at_every_split(text, expected):
    assert read_at_every_split(text) == expected


def test_reader_parts_keep_headers_out():
    reader = HarmonyReader()
    parts = [p for ch in THINKING + CALL_IN_CHANNEL for p in reader.feed(ch)] + reader.finish()
    kinds = {kind: "".join(t for k, t in parts if k == kind) for kind, _ in parts}
    assert kinds["reasoning"] == "The user wants\nthe weather."
    assert "content" not in kinds
    # The call goes to the syntax as its header, then its JSON body.
    assert kinds["calls"] == (
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        f"<|message|>{PARIS_JSON}"
    )


def test_reader_does_not_depend_on_the_thinking_asked():
    adapter = HarmonyAdapter()
    assert isinstance(adapter.reply_reader(None), HarmonyReader)


def test_headers():
    header = parse_header(" to=functions.get_weather<|channel|>commentary json")
    assert (header.channel, header.function, header.kind) == ("commentary", "get_weather", "calls")
    assert parse_header("<|start|>assistant<|channel|>commentary").kind == "content"
    assert parse_header("<|channel|>analysis").kind == "reasoning"
    assert parse_header("<|channel|>commentary to=python <|constrain|>code").kind is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (CALL_IN_CHANNEL[len("<|start|>assistant") :], (None, [PARIS])),
        (THINKING + CALL_IN_CHANNEL, (None, [PARIS])),
        (
            f" to=functions.get_weather<|channel|>commentary json<|message|>{PARIS_JSON}",
            (None, [PARIS]),
        ),
        ("No call here.", ("No call here.", [])),
    ],
)
def test_syntax_driven_from_content(text, expected):
    """A family without the harmony reader: the syntax takes the reply from its first header
    (or an opening recipient) and reads the calls; the other messages are skipped."""
    assert stream_at_every_split("harmony", text) == expected


@pytest.fixture(scope="module")
def harmony_tokenizer(smollm_dir):
    """SmolLM2's tokenizer with harmony's markers as special tokens, as gpt-oss has them."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(smollm_dir))
    tokenizer.add_special_tokens({"additional_special_tokens": HARMONY_TOKENS})
    return tokenizer


FORCED = (
    f"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{PARIS_JSON}"
    "<|call|>"
)


def test_forced_grammar_writes_the_special_tokens(harmony_tokenizer):
    ids = harmony_tokenizer.encode(FORCED, add_special_tokens=False)
    specials = {harmony_tokenizer.convert_tokens_to_ids(t) for t in HARMONY_TOKENS}
    assert sum(i in specials for i in ids) == 4  # channel, constrain, message, call
    assert grammar_accepts(harmony_tokenizer, "harmony", FORCED)
    assert not grammar_accepts(
        harmony_tokenizer, "harmony", FORCED.replace("get_weather", "get_weathers")
    )
    assert not grammar_accepts(harmony_tokenizer, "harmony", FORCED.replace('"Paris"', "Paris"))
    functions = [
        Function("get_weather", closed_objects(WEATHER_SCHEMA)),
        Function("now", {"type": "object", "properties": {}}),
    ]
    now = FORCED.replace("get_weather", "now").replace(PARIS_JSON, "{}")
    assert grammar_accepts(harmony_tokenizer, "harmony", now, functions, parallel=True)


def test_forced_grammar_matches_markers_by_token_not_text(harmony_tokenizer):
    """`<|channel|>` spelled out in ordinary tokens is not the special token the grammar asks
    once the engine has made the grammar's marker text the model's own tokens."""
    import llguidance
    import llguidance.hf

    from inference.adapters.toolcalls import syntax_class
    from inference.engine.grammar_tokens import added_token_ids, with_marker_tokens
    from inference.serving.structured import checked_grammar

    lark = syntax_class("harmony")().grammar([Function("get_weather", WEATHER_SCHEMA)], False)
    lark = with_marker_tokens(lark, added_token_ids(harmony_tokenizer))  # as the engine does
    matcher = llguidance.LLMatcher(
        llguidance.hf.from_tokenizer(harmony_tokenizer), checked_grammar(lark, "tools")
    )
    spelled = harmony_tokenizer.encode("<|chan", add_special_tokens=False)
    assert harmony_tokenizer.decode(spelled) == "<|chan"
    assert matcher.validate_tokens(spelled) == 0
    assert matcher.validate_tokens([harmony_tokenizer.convert_tokens_to_ids("<|channel|>")]) == 1


def test_forced_reply_as_the_engine_detokenizes_it(harmony_tokenizer):
    """mlx-lm's streaming detokenizer writes special tokens' text: the reader sees the headers
    and reads the call; `<|call|>` (a stop token, kept here) ends it."""
    from mlx_lm.tokenizer_utils import TokenizerWrapper

    from inference.engine.detokenize import make_detokenizer

    detokenizer = make_detokenizer(TokenizerWrapper(harmony_tokenizer))
    pieces = []
    for token in harmony_tokenizer.encode(THINKING + FORCED, add_special_tokens=False):
        detokenizer.add_token(token)
        pieces.append(detokenizer.last_segment)
    detokenizer.finalize()
    pieces.append(detokenizer.last_segment)
    assert "".join(pieces) == THINKING + FORCED
    forced = ToolUse(OFFERED.tools, forced="get_weather")
    parser = ReplyParser(HarmonyAdapter(), forced)
    events = [e for piece in pieces for e in parser.feed(piece)] + parser.finish()
    reply = parser.reply()
    assert reply.reasoning == "The user wants\nthe weather."
    assert reply.content is None
    assert [(c.name, json.loads(c.arguments)) for c in reply.tool_calls] == [PARIS]
    assert not any(isinstance(e, TextDelta) for e in events)


def test_stop_tokens(harmony_tokenizer):
    from mlx_lm.tokenizer_utils import TokenizerWrapper

    adapter = HarmonyAdapter()
    ids = adapter.stop_token_ids(TokenizerWrapper(harmony_tokenizer))  # as the engine has it
    for token in ("<|return|>", "<|call|>", "<|endoftext|>"):
        assert harmony_tokenizer.convert_tokens_to_ids(token) in ids
    assert harmony_tokenizer.convert_tokens_to_ids("<|end|>") not in ids  # ends a message only
    assert adapter.tool_syntax().name == "harmony"


def weather_call(call_id: str, city: str) -> dict:
    arguments = json.dumps({"city": city})
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": arguments},
    }


def test_prepare_messages_passes_thinking_back():
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
        {
            "role": "assistant",
            "content": "Let me look.",
            "reasoning_content": "Paris, then Rome.",
            "tool_calls": [weather_call("a", "Paris"), weather_call("b", "Rome")],
        },
        {"role": "tool", "tool_call_id": "b", "content": "rain"},
        {"role": "tool", "tool_call_id": "a", "content": "sun"},
        {"role": "assistant", "content": "Sun, then rain.", "reasoning": "Easy."},
    ]
    prepared = HarmonyAdapter().prepare_messages(messages)
    assert prepared[0] == {"role": "user", "content": "Weather?"}
    # The template raises on a call with both text and thinking: the thinking stays.
    first = prepared[1]
    assert first["thinking"] == "Paris, then Rome." and "content" not in first
    assert "reasoning_content" not in first
    # One call per assistant message, each followed by its own result.
    assert [
        (m["role"], m.get("tool_call_id") or m["tool_calls"][0]["id"]) for m in prepared[1:5]
    ] == [
        ("assistant", "a"),
        ("tool", "a"),
        ("assistant", "b"),
        ("tool", "b"),
    ]
    assert "thinking" not in prepared[3]
    assert prepared[5] == {"role": "assistant", "content": "Sun, then rain.", "thinking": "Easy."}


def test_the_real_template_renders_thinking_calls_and_results(llama_cpp_tree, harmony_tokenizer):
    template = (llama_cpp_tree / "models/templates/openai-gpt-oss-120b.jinja").read_text()
    adapter = HarmonyAdapter(FamilyProfile(adapter="harmony", chat_template=template))
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather",
                "parameters": WEATHER_SCHEMA,
            },
        }
    ]
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "I should call get_weather.",
            "tool_calls": [weather_call("a", "Paris")],
        },
        {"role": "tool", "tool_call_id": "a", "content": "sunny"},
    ]
    tokens = adapter.render_prompt(
        harmony_tokenizer, messages, tools, template_kwargs={"reasoning_effort": "high"}
    )
    text = harmony_tokenizer.decode(tokens)
    assert "Reasoning: high" in text
    assert "# Instructions\n\nBe brief." in text
    assert "type get_weather = " in text
    assert (
        "<|start|>assistant<|channel|>analysis<|message|>I should call get_weather.<|end|>" in text
    )
    assert (
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
        '{"city": "Paris"}<|call|>'
    ) in text
    assert (
        '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"sunny"' in text
    )
    assert text.endswith("<|start|>assistant")


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"effort": "high"}, {"reasoning_effort": "high"}),
        ({"effort": "xhigh"}, {"reasoning_effort": "high"}),
        ({"effort": "max"}, {"reasoning_effort": "high"}),
        ({"effort": "minimal"}, {"reasoning_effort": "low"}),
        ({"effort": "none"}, {"reasoning_effort": "low"}),
        ({"enabled": False}, {"reasoning_effort": "low"}),
        ({"budget": 2048}, {"reasoning_effort": "low"}),
        ({"budget": 8000}, {"reasoning_effort": "medium"}),
        ({"budget": 32000}, {"reasoning_effort": "high"}),
        ({"enabled": True}, {}),  # the template's own default (medium)
        ({}, {}),
        # A forced call cannot think, but the prompt keeps the effort: the same cached prefix.
        ({"effort": "high", "constrained": True}, {"reasoning_effort": "high"}),
    ],
)
def test_reasoning_effort_reaches_the_template(kwargs, expected):
    enabled = kwargs.pop("enabled", None)
    plan = plan_thinking(HarmonyAdapter(), enabled, **kwargs)
    assert plan.template_kwargs == expected
    assert plan.thinking is None  # the reader is harmony's whatever the thinking


def test_reasoning_effort_left_out_for_other_families():
    qwen = get_adapter(
        FamilyProfile(
            adapter="chatml",
            reasoning_start="<think>",
            reasoning_end="</think>",
            thinking_switch="enable_thinking",
        )
    )
    assert plan_thinking(qwen, True, effort="high").template_kwargs == {"enable_thinking": True}


def test_the_real_template_takes_a_tool_without_description(llama_cpp_tree, harmony_tokenizer):
    """Anthropic's tools often have no description; the template writes one for every tool."""
    template = (llama_cpp_tree / "models/templates/openai-gpt-oss-120b.jinja").read_text()
    adapter = HarmonyAdapter(FamilyProfile(adapter="harmony", chat_template=template))
    tools = [{"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}]
    messages = [{"role": "user", "content": "Time?"}]
    text = harmony_tokenizer.decode(adapter.render_prompt(harmony_tokenizer, messages, tools))
    assert "// \ntype now = " in text
