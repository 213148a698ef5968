"""/v1 in-process: every request shape the views accept or refuse, with the tiny model."""

import json
import logging

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient

from catalog.models import CatalogModel

CHAT = "/v1/chat/completions"
NO_EOS = {"2": -100}


@pytest.fixture
def tiny_entry(db, tiny_dir):
    return CatalogModel.objects.create(
        public_id="tiny", source=CatalogModel.Source.LOCAL, location=str(tiny_dir)
    )


def chat(client, **body):
    payload = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], **body}
    return client.post(CHAT, payload, content_type="application/json")


def assert_error(response, status, param=None, code=None):
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    assert error["param"] == param
    assert error["code"] == code
    return error


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
    assert_error(chat(client), 400, "messages", "context_length_exceeded")


def test_unknown_fields_are_ignored_with_a_warning(client, tiny_entry, caplog):
    with caplog.at_level(logging.WARNING):
        response = chat(client, max_tokens=1, frobnicate=True)
    assert response.status_code == 200
    assert "frobnicate" in caplog.text


MESSAGES = [{"role": "user", "content": "Hi"}]
BAD_REQUESTS = [
    ("not json", "{nope", 400, None, None),
    ("array body", "[1, 2]", 400, None, None),
    ("no model", json.dumps({"messages": MESSAGES}), 400, "model", None),
    ("empty messages", {"messages": []}, 400, "messages", None),
    ("bad role", {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages.0.role", None),
    ("user without content", {"messages": [{"role": "user"}]}, 400, "messages.0", None),
    ("temperature too high", {"temperature": 3}, 400, "temperature", None),
    ("temperature a string", {"temperature": "hot"}, 400, "temperature", None),
    ("top_p above 1", {"top_p": 1.5}, 400, "top_p", None),
    ("max_tokens zero", {"max_tokens": 0}, 400, "max_tokens", None),
    ("five stops", {"stop": ["a", "b", "c", "d", "e"]}, 400, "stop", None),
    ("logit_bias word key", {"logit_bias": {"hello": 1}}, 400, "logit_bias", None),
    ("logit_bias out of range", {"logit_bias": {"5": 101}}, 400, "logit_bias.5", None),
    ("logit_bias unknown token", {"logit_bias": {"999999999": 1}}, 400, "logit_bias", None),
    ("n above 1", {"n": 2}, 400, "n", None),
    ("logprobs", {"logprobs": True}, 400, "logprobs", None),
    ("tools", {"tools": [{"type": "function", "function": {"name": "f"}}]}, 400, "tools", None),
    ("json mode", {"response_format": {"type": "json_object"}}, 400, "response_format", None),
    ("unknown model", {"model": "gpt-4"}, 404, "model", "model_not_found"),
    ("relative path as model", {"model": "../../etc/passwd"}, 404, "model", "model_not_found"),
    ("absolute path as model", {"model": "/tmp"}, 404, "model", "model_not_found"),
    (
        "hub repo as model",
        {"model": "mlx-community/Qwen3-0.6B-4bit"},
        404,
        "model",
        "model_not_found",
    ),
]


@pytest.mark.parametrize(
    ("body", "status", "param", "code"),
    [case[1:] for case in BAD_REQUESTS],
    ids=[case[0] for case in BAD_REQUESTS],
)
def test_bad_requests_get_openai_errors(client, tiny_entry, body, status, param, code):
    if isinstance(body, dict):
        body = json.dumps({"model": "tiny", "messages": MESSAGES, **body})
    response = client.post(CHAT, body, content_type="application/json")
    assert_error(response, status, param, code)
    # And the server still answers.
    assert chat(client, max_tokens=1).status_code == 200


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


def stream(body: dict) -> tuple[int, str, list[str]]:
    async def go():
        response = await AsyncClient().post(CHAT, body, content_type="application/json")
        lines = [chunk async for chunk in response.streaming_content]
        return response.status_code, response["Content-Type"], b"".join(lines).decode()

    status, content_type, text = async_to_sync(go)()
    events = [block.removeprefix("data: ") for block in text.split("\n\n") if block]
    return status, content_type, events


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
