"""/v1 in-process: every request shape the views accept or refuse, with the tiny model."""

import json
import logging

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from catalog.models import CatalogModel
from tests.support.helpers import CHAT, NO_EOS, assert_error, stream


def chat(client, **body):
    payload = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], **body}
    return client.post(CHAT, payload, content_type="application/json")


def test_models_lists_enabled_entries_only(client, tiny_entry):
    CatalogModel.objects.create(public_id="off", location="/x", enabled=False)
    body = client.get("/v1/models").json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["tiny"]
    assert body["data"][0]["object"] == "model"
    assert client.get("/v1/models/tiny").json()["id"] == "tiny"
    assert_error(client.get("/v1/models/off"), 404, "model", "model_not_found")


def test_chat_completion_shape(client, tiny_entry):
    response = chat(client, max_tokens=4, temperature=0, logit_bias=NO_EOS)
    assert response.status_code == 200
    body = response.json()
    ChatCompletion.model_validate(body)  # the official SDK's own model of the response
    assert body["id"].startswith("chatcmpl-")
    assert body["object"] == "chat.completion"
    assert body["model"] == "tiny"
    assert body["system_fingerprint"].startswith("fp_")
    (choice,) = body["choices"]
    assert choice["index"] == 0
    assert choice["logprobs"] is None
    assert choice["finish_reason"] == "length"
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["refusal"] is None
    assert isinstance(choice["message"]["content"], str)
    usage = body["usage"]
    assert usage["completion_tokens"] == 4
    assert usage["total_tokens"] == usage["prompt_tokens"] + 4


def test_catalog_defaults_apply(client, tiny_entry):
    tiny_entry.default_max_tokens = 3
    tiny_entry.save()
    usage = chat(client, temperature=0, logit_bias=NO_EOS).json()["usage"]
    assert usage["completion_tokens"] == 3
    without = usage["prompt_tokens"]
    tiny_entry.system_prompt = "Be terse."
    tiny_entry.save()
    assert (
        chat(client, temperature=0, logit_bias=NO_EOS).json()["usage"]["prompt_tokens"] != without
    )


def test_max_completion_tokens_wins_over_max_tokens(client, tiny_entry):
    body = chat(client, max_tokens=9, max_completion_tokens=2, temperature=0, logit_bias=NO_EOS)
    assert body.json()["usage"]["completion_tokens"] == 2


def test_context_length_exceeded(client, tiny_entry):
    tiny_entry.context_length = 8
    tiny_entry.save()
    response = chat(client)
    assert response.status_code == 400
    error = response.json()["error"]
    # OpenAI's object, plus llama-server's two numbers (tests/engine/test_context_overflow.py).
    assert (error["param"], error["code"], error["n_ctx"]) == (
        "messages",
        "context_length_exceeded",
        8,
    )
    assert error["n_prompt_tokens"] > 8


def test_unknown_fields_are_ignored_with_a_warning(client, tiny_entry, caplog):
    with caplog.at_level(logging.WARNING):
        response = chat(client, max_tokens=1, frobnicate=True)
    assert response.status_code == 200
    assert "frobnicate" in caplog.text


MESSAGES = [{"role": "user", "content": "Hi"}]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
COMPLETIONS = "/v1/completions"
# (name, endpoint, body merged over a valid one or raw text, status, param, code)
BAD_REQUESTS = [
    ("not json", CHAT, "{nope", 400, None, None),
    ("array body", CHAT, "[1, 2]", 400, None, None),
    ("no model", CHAT, json.dumps({"messages": MESSAGES}), 400, "model", None),
    ("empty messages", CHAT, {"messages": []}, 400, "messages", None),
    (
        "bad role",
        CHAT,
        {"messages": [{"role": "wizard", "content": "x"}]},
        400,
        "messages.0.role",
        None,
    ),
    ("user without content", CHAT, {"messages": [{"role": "user"}]}, 400, "messages.0", None),
    (
        "image part",
        CHAT,
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}],
                }
            ]
        },
        400,
        "messages.0.content.0",  # tiny reads no images (see tests/api/openai/test_vision.py)
        "image_input_not_supported",
    ),
    (
        "tool message without id",
        CHAT,
        {"messages": [{"role": "tool", "content": "x"}]},
        400,
        "messages.0",
        None,
    ),
    (
        "assistant with nothing",
        CHAT,
        {"messages": [{"role": "assistant"}]},
        400,
        "messages.0",
        None,
    ),
    ("temperature too high", CHAT, {"temperature": 3}, 400, "temperature", None),
    ("temperature a string", CHAT, {"temperature": "hot"}, 400, "temperature", None),
    ("top_p above 1", CHAT, {"top_p": 1.5}, 400, "top_p", None),
    ("max_tokens zero", CHAT, {"max_tokens": 0}, 400, "max_tokens", None),
    (
        "max_completion_tokens negative",
        CHAT,
        {"max_completion_tokens": -1},
        400,
        "max_completion_tokens",
        None,
    ),
    ("five stops", CHAT, {"stop": ["a", "b", "c", "d", "e"]}, 400, "stop", None),
    ("empty stop", CHAT, {"stop": [""]}, 400, "stop", None),
    ("logit_bias word key", CHAT, {"logit_bias": {"hello": 1}}, 400, "logit_bias", None),
    ("logit_bias out of range", CHAT, {"logit_bias": {"5": 101}}, 400, "logit_bias.5", None),
    ("logit_bias unknown token", CHAT, {"logit_bias": {"999999999": 1}}, 400, "logit_bias", None),
    ("n above 8", CHAT, {"n": 9}, 400, "n", None),
    (
        "top_logprobs above 20",
        CHAT,
        {"logprobs": True, "top_logprobs": 21},
        400,
        "top_logprobs",
        None,
    ),
    ("top_logprobs without logprobs", CHAT, {"top_logprobs": 2}, 400, "top_logprobs", None),
    ("presence_penalty too big", CHAT, {"presence_penalty": 2.5}, 400, "presence_penalty", None),
    (
        "tool_choice not in tools",
        CHAT,
        {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "g"}}},
        400,
        "tool_choice",
        None,
    ),
    ("required without tools", CHAT, {"tool_choice": "required"}, 400, "tool_choice", None),
    ("duplicate tools", CHAT, {"tools": [TOOL, TOOL]}, 400, "tools", None),
    (
        "bad tool name",
        CHAT,
        {"tools": [{"type": "function", "function": {"name": "a b"}}]},
        400,
        "tools.0.function.name",
        None,
    ),
    (
        "unknown response_format",
        CHAT,
        {"response_format": {"type": "yaml"}},
        400,
        "response_format",
        None,
    ),
    (
        "invalid json schema",
        CHAT,
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "bogus"}},
            }
        },
        400,
        "response_format.json_schema.schema",
        None,
    ),
    ("unknown model", CHAT, {"model": "gpt-4"}, 404, "model", "model_not_found"),
    (
        "relative path as model",
        CHAT,
        {"model": "../../etc/passwd"},
        404,
        "model",
        "model_not_found",
    ),
    ("absolute path as model", CHAT, {"model": "/tmp"}, 404, "model", "model_not_found"),
    (
        "hub repo as model",
        CHAT,
        {"model": "mlx-community/Qwen3-0.6B-4bit"},
        404,
        "model",
        "model_not_found",
    ),
    ("suffix", COMPLETIONS, {"suffix": "end"}, 400, "suffix", None),
    ("best_of above n", COMPLETIONS, {"best_of": 3}, 400, "best_of", None),
    ("empty prompt", COMPLETIONS, {"prompt": ""}, 400, "prompt", None),
    ("empty prompt in list", COMPLETIONS, {"prompt": ["a", ""]}, 400, "prompt", None),
    ("prompt an object", COMPLETIONS, {"prompt": {"text": "a"}}, 400, "prompt", None),
    ("prompt token outside vocab", COMPLETIONS, {"prompt": [1, 10**9]}, 400, "prompt", None),
    ("echo with logprobs", COMPLETIONS, {"echo": True, "logprobs": 1}, 400, "echo", None),
    ("legacy logprobs above 20", COMPLETIONS, {"logprobs": 21}, 400, "logprobs", None),
    ("legacy unknown model", COMPLETIONS, {"model": "nope"}, 404, "model", "model_not_found"),
]


@pytest.mark.parametrize(
    ("endpoint", "body", "status", "param", "code"),
    [case[1:] for case in BAD_REQUESTS],
    ids=[case[0] for case in BAD_REQUESTS],
)
def test_bad_requests_get_openai_errors(client, tiny_entry, endpoint, body, status, param, code):
    valid = {"model": "tiny", "max_tokens": 1}
    valid.update({"messages": MESSAGES} if endpoint == CHAT else {"prompt": "Hi"})
    if isinstance(body, dict):
        body = json.dumps({**valid, **body})
    response = client.post(endpoint, body, content_type="application/json")
    assert_error(response, status, param, code)
    # And the server still answers.
    assert chat(client, max_tokens=1).status_code == 200


def test_the_table_is_long_enough():
    assert len(BAD_REQUESTS) >= 25


def test_wrong_method(client, db):
    response = client.get(CHAT)
    assert_error(response, 405)
    assert response["Allow"] == "POST"


def test_unknown_endpoint_is_json(client, db):
    assert_error(client.get("/v1/embeddingz"), 404, code="unknown_url")


def test_body_too_large(client, tiny_entry, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = chat(client, messages=[{"role": "user", "content": "x" * 2000}])
    assert_error(response, 413)


def test_disabled_model_is_not_served(client, tiny_entry):
    tiny_entry.enabled = False
    tiny_entry.save()
    assert_error(chat(client), 404, "model", "model_not_found")


@pytest.mark.django_db(transaction=True)
def test_stream_chunks(tiny_dir):
    CatalogModel.objects.create(public_id="tiny", location=str(tiny_dir))
    status, content_type, events = stream(
        {
            "model": "tiny",
            "messages": MESSAGES,
            "stream": True,
            "max_tokens": 3,
            "temperature": 0,
            "logit_bias": NO_EOS,
            "stream_options": {"include_usage": True},
        }
    )
    assert (status, content_type) == (200, "text/event-stream")
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    for c in chunks:
        ChatCompletionChunk.model_validate(c)
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert len({c["created"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all("role" not in c["choices"][0]["delta"] for c in chunks[1:-1])
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 3


@pytest.mark.django_db(transaction=True)
def test_stream_without_usage_has_no_usage_key(tiny_dir):
    CatalogModel.objects.create(public_id="tiny", location=str(tiny_dir))
    _, _, events = stream({"model": "tiny", "messages": MESSAGES, "stream": True, "max_tokens": 2})
    assert all("usage" not in json.loads(e) for e in events[:-1])
