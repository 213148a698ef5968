"""What agents send, as the model reads it: system turns between other turns (Claude Code's
reminders), tool-call arguments whose keys a client reordered, per-request metadata lines,
Codex's namespace tools, and a tool call cut off by max_tokens."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from inference.adapters import FamilyProfile, get_adapter
from inference.adapters.base import place_system_turns, takes_late_system
from inference.adapters.tools import stable_order
from inference.protocol.openai.responses_request import ResponseRequest
from inference.serving.metadata import without_metadata
from inference.serving.responses.items import chat_messages
from inference.serving.tooluse import arguments_object

pytestmark = pytest.mark.database_independent

REMINDER = "<system-reminder>Today is Tuesday.</system-reminder>"
CONVERSATION = [
    {"role": "system", "content": "You are an agent."},
    {"role": "user", "content": "Read hello.txt"},
    {"role": "system", "content": REMINDER},
    {"role": "assistant", "content": "On it."},
    {"role": "user", "content": "Thanks"},
]
# Mistral's and Gemma's templates refuse roles out of alternation; some templates drop them.
STRICT = (
    "{% for m in messages %}{% if m.role == 'system' and not loop.first %}"
    "{{ raise_exception('Conversation roles must alternate') }}{% endif %}"
    "[{{ m.role }}]{{ m.content }}{% endfor %}[assistant]"
)
DROPPING = (
    "{% for m in messages %}{% if m.role != 'system' or loop.first %}"
    "[{{ m.role }}]{{ m.content }}{% endif %}{% endfor %}[assistant]"
)


@pytest.fixture(scope="module")
def tokenizer(smollm_dir: Path):
    from mlx_lm.tokenizer_utils import load as load_tokenizer

    return load_tokenizer(smollm_dir)


def rendered(tokenizer, template: str | None, messages: list[dict], tools=None) -> str:
    adapter = get_adapter(FamilyProfile(adapter="chatml", chat_template=template or ""))
    return tokenizer.decode(adapter.render_prompt(tokenizer, messages, tools))


def test_a_template_that_takes_late_system_turns_keeps_them_in_place(tokenizer):
    """SmolLM2's ChatML template renders a system turn anywhere: the reminder stays between
    the user's message and the assistant's, as Claude Code placed it."""
    assert takes_late_system(tokenizer, None, tokenizer.chat_template)
    text = rendered(tokenizer, None, CONVERSATION)
    assert f"<|im_start|>system\n{REMINDER}<|im_end|>" in text
    assert text.index("Read hello.txt") < text.index(REMINDER) < text.index("On it.")


@pytest.mark.parametrize("template", [STRICT, DROPPING], ids=["refusing", "dropping"])
def test_other_templates_get_the_reminder_in_the_next_user_turn(tokenizer, template):
    assert not takes_late_system(tokenizer, template, template)
    text = rendered(tokenizer, template, CONVERSATION)
    assert f"[user]{REMINDER}\n\nThanks" in text
    assert text.startswith("[system]You are an agent.")


def test_folding_keeps_leading_system_messages_as_one():
    messages = [{"role": "system", "content": "a"}, {"role": "system", "content": "b"}]
    folded = place_system_turns([*messages, {"role": "user", "content": "u"}], late_ok=False)
    assert folded == [{"role": "system", "content": "a\n\nb"}, {"role": "user", "content": "u"}]


def test_a_system_turn_after_the_last_user_joins_it():
    messages = [
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a"},
        {"role": "system", "content": "s"},
    ]
    folded = place_system_turns(messages, late_ok=False)
    assert folded == [{"role": "user", "content": "u\n\ns"}, {"role": "assistant", "content": "a"}]


def test_argument_keys_follow_the_schema_then_sorted():
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "when": {"type": "object", "properties": {"day": {}, "hour": {}}},
        },
    }
    reordered = {"zeta": 1, "when": {"hour": 9, "day": "mon"}, "alpha": 2, "city": "Paris"}
    ordered = stable_order(reordered, schema)
    assert list(ordered) == ["city", "when", "alpha", "zeta"]
    assert list(ordered["when"]) == ["day", "hour"]


def test_reordered_arguments_render_the_same_prompt(tokenizer):
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                },
            },
        }
    ]

    def history(arguments: str) -> list[dict]:
        call = {"id": "c1", "type": "function"}
        call["function"] = {"name": "get_weather", "arguments": arguments}
        return [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "22C", "tool_call_id": "c1"},
        ]

    template = (
        "{% for m in messages %}{{ (m.tool_calls or []) | tojson }}{% endfor %}{{ tools | length }}"
    )
    first = rendered(tokenizer, template, history('{"city": "Paris", "days": 3}'), tools)
    second = rendered(tokenizer, template, history('{"days": 3, "city": "Paris"}'), tools)
    assert first == second
    assert first.index('"city"') < first.index('"days"')


def test_metadata_lines_are_left_out_of_system_messages():
    patterns = (re.compile(r"^x-anthropic-billing-header:"),)
    messages = [
        {"role": "system", "content": "x-anthropic-billing-header: cc_version=2.1;\nYou are"},
        {"role": "system", "content": "x-anthropic-billing-header: cc_version=2.2;"},
        {"role": "user", "content": "x-anthropic-billing-header: typed by the user"},
    ]
    assert without_metadata(messages, patterns) == [
        {"role": "system", "content": "You are"},
        {"role": "user", "content": "x-anthropic-billing-header: typed by the user"},
    ]
    assert without_metadata(messages, ()) is messages


NAMESPACE = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Sub-agents",
    "tools": [
        {"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}},
        {"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
    ],
}
EXEC = {"type": "function", "name": "exec_command", "parameters": {"type": "object"}}


def test_namespace_functions_are_offered_by_name_and_qualified_on_collision():
    request = ResponseRequest.model_validate(
        {"model": "m", "input": "hi", "tools": [EXEC, NAMESPACE, {"type": "web_search"}]}
    )
    offered = {(f.namespace, f.tool.name): f.offered for f in request.functions()}
    assert offered == {
        (None, "exec_command"): "exec_command",
        ("multi_agent_v1", "spawn_agent"): "spawn_agent",
        ("multi_agent_v1", "exec_command"): "multi_agent_v1__exec_command",
    }


def test_a_namespaced_call_in_history_reads_under_its_offered_name():
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "exec_command",
            "namespace": "multi_agent_v1",
            "arguments": "{}",
        },
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
    ]
    offered = {("multi_agent_v1", "exec_command"): "multi_agent_v1__exec_command"}
    messages = chat_messages(items, offered)
    assert messages[1]["tool_calls"][0]["function"]["name"] == "multi_agent_v1__exec_command"
    assert messages[2]["name"] == "multi_agent_v1__exec_command"


@pytest.mark.parametrize(
    ("cut", "expected"),
    [
        ('{"city": "Par', {"city": "Par"}),
        ('{"city": "Paris", "da', {"city": "Paris"}),
        ('{"city": "Paris", "days": ', {"city": "Paris"}),
        ('{"stops": ["Rome", "Os', {"stops": ["Rome", "Os"]}),
        ('{"quote": "say \\"hi', {"quote": 'say "hi'}),
        ('{"path": "C:\\', {"path": "C:"}),
        ('{"ok": tru', {}),
        ("", {}),
    ],
)
def test_a_cut_off_call_gives_its_partial_input_not_an_invented_one(cut, expected):
    assert arguments_object(cut) == expected
