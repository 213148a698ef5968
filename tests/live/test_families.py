"""Each family's own tool call, written by a scripted model behind the family's real chat
template, through a live server: the catalog detects the family from the template alone, and
the official openai and anthropic SDKs get the call parsed, its arguments streamed in pieces
and typed, with no markup left in the text, in chat completions, Messages and Responses."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.live_server import LiveServer, live_server
from tests.support.scripted import WEATHER_TOOL
from tests.support.scripted_families import (
    ARGUMENTS,
    CONTEXT,
    REASONING,
    SCRIPTS,
    build_family_model,
)

# Runs once (SQLite pass): what is read from the model's text; the catalog is only read.
pytestmark = pytest.mark.database_independent

QUESTION = "What is the weather in Paris?"
MARKUP = ("<", "[TOOL", "|>", "｜")
FUNCTION = WEATHER_TOOL["function"]


@pytest.fixture(scope="module")
def server(smollm_dir: Path, llama_cpp_tree: Path, tmp_path_factory) -> Iterator[LiveServer]:
    root = tmp_path_factory.mktemp("family-models")
    setup = []
    for model_id, script in SCRIPTS.items():
        template = (llama_cpp_tree / "models/templates" / script.template).read_text()
        folder = build_family_model(smollm_dir, template, script, root / model_id)
        # No family given: the catalog finds it from the template.
        setup.append(
            ("add_model", model_id, "--local", str(folder), "--context-length", str(CONTEXT))
        )
    with live_server(tmp_path_factory.mktemp("families-server"), *setup) as live:
        yield live


def no_markup(text: str | None) -> None:
    assert not any(mark in (text or "") for mark in MARKUP), text


@pytest.mark.parametrize("model", list(SCRIPTS))
def test_chat_completions(server: LiveServer, model: str):
    client = server.openai(timeout=60)
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": QUESTION}],
        tools=[WEATHER_TOOL],
        stream=True,
    )
    names, pieces, content, reasoning, finish = [], [], "", "", None
    for chunk in stream:
        delta = chunk.choices[0].delta
        content += delta.content or ""
        reasoning += getattr(delta, "reasoning_content", None) or ""
        for call in delta.tool_calls or []:
            names += [call.function.name] if call.function.name else []
            pieces += [call.function.arguments] if call.function.arguments else []
        finish = chunk.choices[0].finish_reason or finish
    assert (names, json.loads("".join(pieces)), finish) == (
        ["get_weather"],
        ARGUMENTS,
        "tool_calls",
    ), server.output()[-3000:]
    assert len(pieces) > 1, pieces  # streamed, not handed over whole at the end
    no_markup(content)
    if SCRIPTS[model].reasoning:
        assert reasoning.strip() == REASONING


@pytest.mark.parametrize("model", list(SCRIPTS))
def test_messages(server: LiveServer, model: str):
    client = server.anthropic(timeout=60)
    tool = {"name": FUNCTION["name"], "input_schema": FUNCTION["parameters"]}
    with client.messages.stream(
        model=model,
        max_tokens=200,
        messages=[{"role": "user", "content": QUESTION}],
        tools=[tool],
    ) as stream:
        deltas = [e for e in stream if e.type == "content_block_delta"]
        message = stream.get_final_message()
    uses = [b for b in message.content if b.type == "tool_use"]
    assert [(u.name, u.input) for u in uses] == [("get_weather", ARGUMENTS)], message
    assert len([d for d in deltas if d.delta.type == "input_json_delta"]) > 1
    assert message.stop_reason == "tool_use"
    for block in message.content:
        if block.type == "text":
            no_markup(block.text)


@pytest.mark.parametrize("model", list(SCRIPTS))
def test_responses(server: LiveServer, model: str):
    client = server.openai(timeout=60)
    tool = {"type": "function", **FUNCTION}
    events = list(client.responses.create(model=model, input=QUESTION, tools=[tool], stream=True))
    pieces = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    done = next(e for e in events if e.type == "response.completed").response
    calls = [item for item in done.output if item.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", ARGUMENTS)]
    assert len(pieces) > 1 and "".join(pieces) == calls[0].arguments
    for item in done.output:
        if item.type == "message":
            no_markup(" ".join(part.text for part in item.content))


@pytest.mark.parametrize("model", list(SCRIPTS))
def test_forced_call_decodes_in_the_family_syntax(server: LiveServer, model: str):
    """tool_choice naming the function: the grammar writes the family's own syntax, its
    markers as the model's own tokens, and the reply parser reads the call it made. (The
    script's pieces inside a value are added tokens, which a grammar's value cannot use, so
    the values can take another path than the script's and run to max_tokens: only the call
    itself and clean text are asserted; tests/toolcalls/test_*_syntaxes.py check each
    grammar against whole calls token by token.)"""
    client = server.openai(timeout=60)
    reply = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": QUESTION}],
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=60,
    )
    message = reply.choices[0].message
    log = server.output()[-2000:]
    assert [c.function.name for c in message.tool_calls or []] == ["get_weather"], (message, log)
    assert message.tool_calls[0].function.arguments.startswith("{"), message
    no_markup(message.content)
