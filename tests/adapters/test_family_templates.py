"""History as each real chat template expects it: llama.cpp's copies of the families' templates
(`models/templates/`) render a tool round trip with reasoning through our adapters, and the text
is compared with what llama.cpp's own chat layer renders for the same request (the
llama-chat-render tool, tests/tools/llama_chat_render.cpp: the path llama-server takes)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from inference.adapters.base import FamilyProfile
from inference.adapters.registry import get_adapter

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

REASONING = "The user wants weather; call the tool."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Time in a zone",
            "parameters": {
                "type": "object",
                "properties": {"zone": {"type": "string"}},
                "required": ["zone"],
            },
        },
    },
]
# Template variables given to both renderers: thinking on under each family's switch, and a
# fixed date (llama.cpp passes today's as date_string; Llama 3.1's template defaults to this).
KWARGS = {"enable_thinking": True, "thinking": True, "date_string": "26 Jul 2024"}


def conversation(ending: str, arguments: str = '{"city": "Paris", "days": 2}') -> list[dict]:
    """A tool round trip whose assistant turn reasons and calls with JSON-string arguments (as
    OpenAI clients send them). "user": it goes on with an answer and a new question (Mistral's
    templates want an answer between a tool result and the next user turn); "tool": it ends on
    the result, so the reasoning is after the last user message, where templates keep it."""
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": REASONING,
            "tool_calls": [
                # Mistral Small 3.2 takes only 9-character alphanumeric call ids.
                {
                    "id": "Wx7Pq2Rt9",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "Wx7Pq2Rt9", "content": "Sunny, 21C"},
    ]
    if ending == "user":
        messages.append({"role": "assistant", "content": "Sunny in Paris."})
        messages.append({"role": "user", "content": "Thanks. And Lyon?"})
    return messages


@dataclass(frozen=True)
class Family:
    adapter: str
    call: tuple[str, ...]  # the call as the template writes it: name and each argument
    keeps_reasoning: bool  # shows the reasoning of a turn after the last user message


QWEN_XML = ("<function=get_weather>", "<parameter=city>\nParis\n</parameter>")
QWEN_XML += ("<parameter=days>\n2\n</parameter>",)
HERMES = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}',)
GLM = ("<tool_call>get_weather", "<arg_key>city</arg_key>", "<arg_value>Paris</arg_value>")
GLM += ("<arg_key>days</arg_key>", "<arg_value>2</arg_value>")
DSML = ('invoke name="get_weather">', 'parameter name="city" string="true">Paris<')
DSML += ('parameter name="days" string="false">2<',)
KIMI = ("functions.get_weather:0<|tool_call_argument_begin|>", '{"city": "Paris", "days": 2}')
MISTRAL = ('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 2}',)
DEEPSEEK = ('<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris", "days": 2}',)
LLAMA = ('{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}',)

FAMILIES: dict[str, Family] = {
    "Qwen3.5-4B": Family("chatml", QWEN_XML, True),
    "Qwen3-Coder": Family("chatml", QWEN_XML, False),
    "Qwen-Qwen3-0.6B": Family("chatml", HERMES, True),
    "GLM-4.6": Family("default", GLM, True),
    "GLM-4.7-Flash": Family("default", GLM, True),
    # The harmony adapter (get_adapter falls back to the default where a build lacks it; both
    # render as llama.cpp does: the template reads reasoning_content when no `thinking` is given).
    "openai-gpt-oss-120b": Family(
        "harmony",
        ("<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>",),
        True,
    ),
    "deepseek-ai-DeepSeek-V3.1": Family("default", DEEPSEEK, False),
    "deepseek-ai-DeepSeek-V3.2": Family("default", DSML, True),
    "deepseek-ai-DeepSeek-V4": Family("default", DSML, True),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": Family(
        "default", ("<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n",), False
    ),
    "moonshotai-Kimi-K2": Family("default", KIMI, False),
    "Kimi-K3": Family(
        "default",
        ('<|open|>call tool="get_weather"', 'argument key="city" type="string"<|sep|>Paris'),
        True,
    ),
    "MiniMax-M2": Family(
        "default",
        ('<invoke name="get_weather">', '<parameter name="city">Paris</parameter>'),
        True,
    ),
    "Mistral-Small-3.2-24B-Instruct-2506": Family(
        "mistral", ('[TOOL_CALLS]get_weather[CALL_ID]Wx7Pq2Rt9[ARGS]{"city": "Paris"',), False
    ),
    "unsloth-mistral-Devstral-Small-2507": Family("mistral", MISTRAL, False),
    "mistralai-Ministral-3-14B-Reasoning-2512": Family("mistral", MISTRAL, False),
    "meta-llama-Llama-3.1-8B-Instruct": Family("llama3", LLAMA, False),
    "meta-llama-Llama-3.3-70B-Instruct": Family("llama3", LLAMA, False),
    "google-gemma-2-2b-it": Family("gemma", HERMES, False),
    "google-gemma-4-31B-it": Family(
        "gemma", ('<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}',), True
    ),
    "ibm-granite-granite-4.0": Family("default", HERMES, False),
    "NVIDIA-Nemotron-Nano-v2": Family(
        "default",
        ('<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]',),
        False,
    ),
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": Family("default", QWEN_XML, True),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": Family("chatml", HERMES, False),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": Family(
        "default",
        ('"tool_name": "get_weather", "parameters": {"city": "Paris", "days": 2}',),
        True,
    ),
    "HuggingFaceTB-SmolLM3-3B": Family("chatml", HERMES, False),
}

# Templates that show the reasoning of turns before the last user message too.
KEEPS_EARLIER_REASONING = {
    "deepseek-ai-DeepSeek-V4",
    "Kimi-K3",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use",
}

# Where llama.cpp's rendering is not ours, and why (each asserted in test_where_llama_cpp_differs).
LLAMA_DIFFERS = {
    # Templates that render tool_calls but describe no tools: both keep the native calls;
    # we also describe the offered tools in the system turn (with a call in the family's
    # syntax), llama.cpp offers none, so the model cannot know what it may call.
    "deepseek-ai-DeepSeek-V3.1",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
    # No tool calls in the template at all: llama.cpp drops the call (an empty turn).
    "HuggingFaceTB-SmolLM3-3B",
    # llama.cpp keeps the tool role, which Gemma 2's template refuses: it cannot render this.
    "google-gemma-2-2b-it",
    # Our Gemma adapter folds the system turn into the user's; Gemma 4's template has a system turn.
    "google-gemma-4-31B-it",
    # llama.cpp's Ministral handler moves reasoning_content into a [THINK] content chunk.
    "mistralai-Ministral-3-14B-Reasoning-2512",
}


@pytest.fixture(scope="module")
def tokenizer(smollm_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(smollm_dir))


@pytest.fixture(scope="module")
def templates(llama_cpp_tree: Path) -> dict[str, str]:
    folder = llama_cpp_tree / "models/templates"
    names = [*FAMILIES, "Kimi-K2-Thinking"]
    return {name: (folder / f"{name}.jinja").read_text() for name in names}


def render(tokenizer, name: str, template: str, messages: list[dict], adapter: str = "") -> str:
    profile = FamilyProfile(adapter=adapter or FAMILIES[name].adapter, chat_template=template)
    ids = get_adapter(profile).render_prompt(tokenizer, messages, TOOLS, dict(KWARGS))
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


@pytest.fixture(scope="module")
def ours(tokenizer, templates) -> dict[tuple[str, str], str]:
    return {
        (name, ending): render(tokenizer, name, templates[name], conversation(ending))
        for name in FAMILIES
        for ending in ("user", "tool")
    }


@pytest.fixture(scope="module")
def llama_cpp(llama_tools: Path, tokenizer, templates) -> dict[tuple[str, str], dict]:
    """llama.cpp's rendering of every template and conversation, from one llama-chat-render run
    (the same bos/eos text as our tokenizer's)."""
    keys = [(name, ending) for name in templates for ending in ("user", "tool")]
    requests = [
        {
            "template": templates[name],
            "bos": tokenizer.bos_token,
            "eos": tokenizer.eos_token,
            "messages": conversation(ending),
            "tools": TOOLS,
            "kwargs": KWARGS,
        }
        for name, ending in keys
    ]
    result = subprocess.run(
        [str(llama_tools / "llama-chat-render")],
        input="".join(json.dumps(r) + "\n" for r in requests),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(answers) == len(keys), result.stderr[-2000:]
    return dict(zip(keys, answers, strict=True))


@pytest.mark.parametrize("name", FAMILIES)
def test_tool_round_trip_renders_as_the_template_writes_it(ours, name):
    text = ours[name, "user"]
    for piece in FAMILIES[name].call:
        assert piece in text, f"{name}: {piece!r} missing from\n{text}"
    assert "Sunny, 21C" in text
    assert "Thanks. And Lyon?" in text
    # Both tools are offered: described by the template or by our Hermes system prompt.
    assert "Weather of a city" in text and "Time in a zone" in text
    # Before the last user turn the templates drop the reasoning, but the few that keep every
    # turn's.
    assert (REASONING in text) == (name in KEEPS_EARLIER_REASONING), name


@pytest.mark.parametrize("name", FAMILIES)
def test_reasoning_reaches_the_template_after_the_last_user(ours, name):
    text = ours[name, "tool"]
    assert "Sunny, 21C" in text
    assert (REASONING in text) == FAMILIES[name].keeps_reasoning, text


@pytest.mark.parametrize("name", [n for n in FAMILIES if n not in LLAMA_DIFFERS])
@pytest.mark.parametrize("ending", ["user", "tool"])
def test_matches_llama_cpp(ours, llama_cpp, name, ending):
    answer = llama_cpp[name, ending]
    assert "prompt" in answer, answer
    assert ours[name, ending] == answer["prompt"]


def test_where_llama_cpp_differs(ours, llama_cpp, tokenizer, templates):
    for name in ("deepseek-ai-DeepSeek-V3.1", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"):
        assert "<｜tool▁call▁begin｜>" in llama_cpp[name, "user"]["prompt"]
        assert "<｜tool▁call▁begin｜>" in ours[name, "user"]
        assert "Time in a zone" in ours[name, "user"]
        assert "Time in a zone" not in llama_cpp[name, "user"]["prompt"]
    smollm3 = llama_cpp["HuggingFaceTB-SmolLM3-3B", "user"]["prompt"]
    assert "get_weather" not in smollm3.split("Weather in Paris?")[1]
    assert "alternate" in llama_cpp["google-gemma-2-2b-it", "user"]["error"]
    gemma4 = "google-gemma-4-31B-it"
    assert "<|turn>system\n<|think|>\nYou are terse." in llama_cpp[gemma4, "user"]["prompt"]
    assert "<|turn>user\nYou are terse.\n\nWeather in Paris?" in ours[gemma4, "user"]
    # Through the default adapter (no folding), Gemma 4 renders as llama.cpp does.
    for ending in ("user", "tool"):
        plain = render(tokenizer, gemma4, templates[gemma4], conversation(ending), "default")
        assert plain == llama_cpp[gemma4, ending]["prompt"]
    ministral = "mistralai-Ministral-3-14B-Reasoning-2512"
    assert f"[THINK]{REASONING}[/THINK]" in llama_cpp[ministral, "tool"]["prompt"]
    assert REASONING not in ours[ministral, "tool"]


def test_kimi_k2_thinking_needs_list_methods_transformers_refuses(llama_cpp, tokenizer, templates):
    """Its template appends to and pops from a list, which transformers' sandbox forbids: we
    cannot render it; llama.cpp's engine can, and keeps the reasoning after the last user."""
    from jinja2.exceptions import SecurityError

    with pytest.raises(SecurityError):
        render(tokenizer, "", templates["Kimi-K2-Thinking"], conversation("tool"), "default")
    assert f"<think>{REASONING}</think>" in llama_cpp["Kimi-K2-Thinking", "tool"]["prompt"]


@pytest.mark.parametrize("name", ["Qwen3.5-4B", "GLM-4.6", "MiniMax-M2", "Qwen-Qwen3-0.6B"])
def test_arguments_render_in_the_schema_order_whatever_order_they_come_in(
    tokenizer, templates, name
):
    """Our choice (llama.cpp keeps the client's order): a client that reorders the keys
    between turns does not change the prompt, so the prefix cache holds."""
    reordered = conversation("user", '{"days": 2, "city": "Paris"}')
    assert render(tokenizer, name, templates[name], reordered) == render(
        tokenizer, name, templates[name], conversation("user")
    )


# -- the serving side: each API's earlier reasoning becomes reasoning_content


def test_chat_request_reasoning_reaches_the_template(tokenizer, templates):
    from inference.protocol.openai.chat import ChatMessage
    from inference.serving.openai.plan import message_dict

    sent = conversation("tool")
    sent[2] = {**sent[2], "reasoning_content": None, "reasoning": REASONING}  # vLLM's name
    messages = [message_dict(ChatMessage.model_validate(m)) for m in sent]
    assert messages[2]["reasoning_content"] == REASONING
    assert "reasoning_content" not in messages[1]
    text = render(tokenizer, "Qwen3.5-4B", templates["Qwen3.5-4B"], messages)
    assert f"<think>\n{REASONING}\n</think>" in text


def test_anthropic_thinking_blocks_become_reasoning_content():
    from inference.protocol.anthropic.requests import MessagesRequest
    from inference.serving.anthropic.plan import template_messages

    request = MessagesRequest.model_validate(
        {
            "model": "m",
            "max_tokens": 5,
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": REASONING, "signature": "s"},
                        {"type": "redacted_thinking", "data": "opaque"},
                        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}},
                    ],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
                },
            ],
        }
    )
    messages, _ = template_messages(request)
    assert messages[1]["reasoning_content"] == REASONING
    assert "reasoning_content" not in messages[0]


def test_responses_reasoning_items_go_to_the_assistant_turn_after_them():
    from inference.serving.responses.items import chat_messages

    def reasoning(text: str) -> dict:
        return {"type": "reasoning", "content": [{"type": "reasoning_text", "text": text}]}

    call = {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"}
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "u"}]}
    answer = {"type": "message", "role": "assistant", "content": [{"text": "a"}]}
    summary_only = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}]}
    messages = chat_messages(
        [
            user,
            reasoning("first"),
            answer,
            reasoning("second"),
            call,
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            summary_only,
            answer,
        ]
    )
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[1]["reasoning_content"] == "first\n\nsecond"
    assert messages[1]["tool_calls"][0]["function"]["name"] == "get_weather"
    # A summary is not what the model wrote (OpenAI's encrypted reasoning): left out.
    assert "reasoning_content" not in messages[3]
