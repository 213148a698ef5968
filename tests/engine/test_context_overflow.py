"""Prompts over the model's context: the typed error in each dialect (with both numbers), and
the catalog's truncate_middle policy (engine/overflow.py), with SmolLM2's real tokenizer and
chat template and through every dialect on the tiny model."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient
from transformers import AutoTokenizer

from inference.adapters import FamilyProfile, get_adapter
from inference.engine.overflow import droppable, reply_room, truncate_middle
from inference.serving.generation import TRUNCATED_HEADER
from tests.support.helpers import CHAT, NO_EOS

# The engine never imports Django: the PostgreSQL pass would only repeat these.
pytestmark = pytest.mark.database_independent

SYSTEM = {"role": "system", "content": "You are terse."}
LAST = {"role": "user", "content": "And the last question?"}


def conversation(turns: int = 6) -> list[dict]:
    messages = [SYSTEM]
    for i in range(turns):
        messages.append({"role": "user", "content": f"Old question number {i} about things?"})
        messages.append({"role": "assistant", "content": f"Old answer number {i}, at length."})
    return [*messages, LAST]


def call(i: int) -> dict:
    function = {"name": "read", "arguments": json.dumps({"path": f"file{i}"})}
    return {"id": f"call_{i}", "type": "function", "function": function}


READ_TOOL = {
    "type": "function",
    "function": {
        "name": "read",
        "description": "Reads a file of the project and returns its text.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "the file's path"}},
            "required": ["path"],
        },
    },
}


def agent_session() -> list[dict]:
    """A coding agent's session: two human turns, the second a chain of tool calls."""
    messages = [SYSTEM, {"role": "user", "content": "Fix the bug."}]
    messages.append({"role": "assistant", "content": "Done."})
    messages.append({"role": "user", "content": "Now the tests."})
    for i in range(4):
        messages.append({"role": "assistant", "content": "", "tool_calls": [call(i), call(i + 10)]})
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": f"text {i}"})
        messages.append({"role": "tool", "tool_call_id": f"call_{i + 10}", "content": "more"})
    return messages


@pytest.fixture(scope="module")
def render(tiny_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    adapter = get_adapter(FamilyProfile())

    def render(messages: list[dict]) -> list[int]:
        return adapter.render_prompt(tokenizer, messages)

    render.decode = tokenizer.decode
    return render


def test_reply_room():
    assert reply_room(1000, 16) == 16
    assert reply_room(1000, 32000) == 250  # a quarter of the context at most
    assert reply_room(1000, None) == 250
    assert reply_room(2, None) == 1


def test_old_turns_go_system_and_last_turn_stay(render):
    messages = conversation()
    whole = render(messages)
    context = len(whole) - 10
    tokens, dropped = truncate_middle(messages, whole, render, context, 8)
    assert len(tokens) <= context - 8
    assert dropped % 2 == 0 and dropped > 0  # whole turns: a question with its answer
    text = render.decode(tokens)
    assert text.startswith("<|im_start|>system\nYou are terse.")
    assert "Old question number 0" not in text
    assert text.rstrip().endswith("And the last question?<|im_end|>\n<|im_start|>assistant")
    kept = conversation()[:1] + conversation()[1 + dropped :]
    assert tokens == render(kept)  # the fewest turns dropped: one more would not be needed
    fewer = conversation()[:1] + conversation()[dropped - 1 :]
    assert len(render(fewer)) > context - 8


def test_a_prompt_that_fits_is_untouched(render):
    messages = conversation()
    whole = render(messages)
    assert truncate_middle(messages, whole, render, len(whole) + 8, 8) == (whole, 0)


def test_when_even_the_last_turn_does_not_fit_nothing_is_dropped(render):
    messages = conversation()
    whole = render(messages)
    assert truncate_middle(messages, whole, render, 20, 8) == (whole, 0)


def test_tool_calls_stay_with_their_results():
    messages = agent_session()
    units = droppable(messages)
    # The first human turn, then the second turn's exchanges but its last; the system
    # message and the second turn's user message are in none.
    assert units == [[1, 2], [4, 5, 6], [7, 8, 9], [10, 11, 12]]
    for unit in units:
        for i in unit:
            for tool_call in messages[i].get("tool_calls") or []:
                results = [j for j in unit if messages[j].get("tool_call_id") == tool_call["id"]]
                assert results, f"{tool_call['id']} left without its result"


def test_an_agent_turn_keeps_its_user_message_and_last_exchange(render):
    messages = agent_session()
    whole = render(messages)
    tokens, dropped = truncate_middle(messages, whole, render, len(whole), 4)
    assert dropped == 2  # the first human turn was enough
    everything_but_last = len(render([messages[0], messages[3], *messages[-3:]]))
    tokens, dropped = truncate_middle(messages, whole, render, everything_but_last + 4, 4)
    assert dropped == 11
    assert tokens == render([messages[0], messages[3], *messages[-3:]])


def test_a_user_message_between_a_call_and_its_result_is_no_turn():
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "", "tool_calls": [call(1)]},
        {"role": "user", "content": "interjection"},
        {"role": "tool", "tool_call_id": "call_1", "content": "r"},
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": "c"},
    ]
    assert droppable(messages) == [[0, 1, 2, 3]]


# Through the dialects: the tiny model (SmolLM2's tokenizer and template, 512 tokens).


def post(client, url: str, body: dict, **headers):
    return client.post(url, body, content_type="application/json", **headers)


def chat_body() -> dict:
    return {"model": "tiny", "messages": conversation(), "max_tokens": 4, "logit_bias": NO_EOS}


def whole_prompt_tokens(client) -> int:
    """The conversation's tokens with nothing dropped: count_tokens under the error policy."""
    messages = conversation()
    body = {"model": "tiny", "system": SYSTEM["content"], "messages": messages[1:]}
    response = post(client, "/v1/messages/count_tokens", body)
    assert response.status_code == 200, response.content
    return response.json()["input_tokens"]


@pytest.fixture
def truncating(tiny_entry):
    tiny_entry.context_overflow = "truncate_middle"
    tiny_entry.save()
    return tiny_entry


def stream_of(url: str, body: dict) -> tuple[int, dict, str]:
    async def go():
        response = await AsyncClient().post(url, body, content_type="application/json")
        if response.status_code != 200:
            return response.status_code, dict(response.headers), response.content.decode()
        text = b"".join([chunk async for chunk in response.streaming_content]).decode()
        return response.status_code, dict(response.headers), text

    return async_to_sync(go)()


@pytest.mark.parametrize("streamed", [False, True])
def test_openai_error_names_both_numbers(client, tiny_entry, streamed):
    tiny_entry.context_length = 16
    tiny_entry.save()
    status, _, text = stream_of(CHAT, {**chat_body(), "stream": streamed})
    assert status == 400
    error = json.loads(text)["error"]
    assert error["type"] == "invalid_request_error"
    assert (error["code"], error["param"], error["n_ctx"]) == (
        "context_length_exceeded",
        "messages",
        16,
    )
    assert error["message"].startswith(
        f"This model's maximum context length is 16 tokens. However, your messages resulted in "
        f"{error['n_prompt_tokens']} tokens."
    )
    completion = post(client, "/v1/completions", {"model": "tiny", "prompt": "Hi " * 40})
    error = completion.json()["error"]
    assert (completion.status_code, error["param"], error["n_ctx"]) == (400, "prompt", 16)
    assert "your prompt resulted in" in error["message"]


@pytest.mark.parametrize("streamed", [False, True])
def test_anthropic_error_is_prompt_is_too_long(client, tiny_entry, streamed):
    tiny_entry.context_length = 16
    tiny_entry.save()
    body = {"model": "tiny", "max_tokens": 4, "messages": conversation()[1:]}
    # count_tokens counts a prompt over the context all the same: the same prompt.
    tokens = post(client, "/v1/messages/count_tokens", body).json()["input_tokens"]
    status, _, text = stream_of("/v1/messages", {**body, "stream": streamed})
    assert status == 400
    assert json.loads(text) == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": f"prompt is too long: {tokens} tokens > 16 maximum",
        },
    }


@pytest.mark.parametrize("streamed", [False, True])
def test_responses_error_is_openai_shaped(tiny_entry, streamed):
    tiny_entry.context_length = 16
    tiny_entry.save()
    body = {"model": "tiny", "input": "Hi " * 40, "stream": streamed}
    status, _, text = stream_of("/v1/responses", body)
    error = json.loads(text)["error"]
    assert (status, error["code"], error["n_ctx"]) == (400, "context_length_exceeded", 16)
    assert error["n_prompt_tokens"] > 16


def test_truncated_chat_says_so(client, truncating):
    whole = whole_prompt_tokens(client)
    # Over the context; or inside it, but short of room for the 4 tokens asked for.
    for context in (whole - 2, whole + 2):
        truncating.context_length = context
        truncating.save()
        response = post(client, CHAT, chat_body())
        assert response.status_code == 200, response.content
        dropped = int(response[TRUNCATED_HEADER])
        usage = response.json()["usage"]
        assert dropped > 0 and usage["truncated_messages"] == dropped
        assert usage["prompt_tokens"] <= context - 4
    truncating.context_overflow = "error"
    truncating.save()
    response = post(client, CHAT, chat_body())
    assert response.status_code == 200  # it fits, with two tokens of room: not truncated
    assert TRUNCATED_HEADER not in response
    usage = response.json()["usage"]
    assert "truncated_messages" not in usage
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (whole, 2)


def test_truncated_stream_has_the_header_and_the_usage(client, truncating):
    truncating.context_length = whole_prompt_tokens(client) - 2
    truncating.save()
    body = {**chat_body(), "stream": True, "stream_options": {"include_usage": True}}
    status, headers, text = stream_of(CHAT, body)
    assert status == 200
    dropped = int(headers[TRUNCATED_HEADER])
    chunks = [json.loads(b.removeprefix("data: ")) for b in text.split("\n\n") if b[6:7] == "{"]
    assert chunks[-1]["usage"]["truncated_messages"] == dropped > 0


def test_truncated_messages_and_count_tokens(client, truncating):
    whole = whole_prompt_tokens(client)
    truncating.context_length = whole - 2
    truncating.save()
    body = {"model": "tiny", "system": SYSTEM["content"], "messages": conversation()[1:]}
    response = post(client, "/v1/messages", {**body, "max_tokens": 4})
    assert response.status_code == 200, response.content
    usage = response.json()["usage"]
    assert usage["truncated_messages"] == int(response[TRUNCATED_HEADER]) > 0
    assert usage["input_tokens"] <= whole - 2 - 4
    counted = post(client, "/v1/messages/count_tokens", body).json()["input_tokens"]
    assert counted < whole  # what would be read: old turns dropped (room: a quarter)
    assert counted <= (whole - 2) - (whole - 2) // 4


def test_truncated_response_usage(client, truncating):
    truncating.context_length = whole_prompt_tokens(client) - 2
    truncating.save()
    messages = conversation()
    body = {
        "model": "tiny",
        "instructions": SYSTEM["content"],
        "input": messages[1:],
        "max_output_tokens": 4,
    }
    response = post(client, "/v1/responses", body)
    assert response.status_code == 200, response.content
    assert response.json()["usage"]["truncated_messages"] == int(response[TRUNCATED_HEADER]) > 0


def test_truncation_with_tool_calls_through_chat(client, truncating):
    # Inlined into this template's text, the session's calls and its tool take more than the
    # tiny model's 512 tokens: the first human turn goes, then the oldest exchanges (3 messages
    # each).
    body = {**chat_body(), "messages": agent_session(), "tools": [READ_TOOL]}
    response = post(client, CHAT, body)
    assert response.status_code == 200, response.content
    assert response.json()["usage"]["prompt_tokens"] <= 512 - 4
    assert int(response[TRUNCATED_HEADER]) in (2, 5, 8, 11)


def test_truncation_errors_when_the_last_turn_does_not_fit(client, truncating):
    truncating.context_length = 16
    truncating.save()
    response = post(client, CHAT, chat_body())
    error = response.json()["error"]
    assert (response.status_code, error["code"], error["n_ctx"]) == (
        400,
        "context_length_exceeded",
        16,
    )
    body = {"model": "tiny", "max_tokens": 4, "messages": conversation()[1:]}
    message = post(client, "/v1/messages", body).json()["error"]["message"]
    assert message.startswith("prompt is too long: ") and message.endswith(" tokens > 16 maximum")
