"""Legacy /v1/completions in-process with the tiny model."""

import json

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient
from openai.types import Completion

from catalog.models import CatalogModel

URL = "/v1/completions"
NO_EOS = {"2": -100}
HELLO = 19556


@pytest.fixture
def tiny_entry(db, tiny_dir):
    return CatalogModel.objects.create(public_id="tiny", location=str(tiny_dir))


def complete(client, **body) -> dict:
    payload = {"model": "tiny", "prompt": "Once upon", "temperature": 0, "logit_bias": NO_EOS}
    response = client.post(URL, {**payload, **body}, content_type="application/json")
    assert response.status_code == 200, response.content
    return Completion.model_validate(response.json()).model_dump(mode="json")


def test_shape_and_default_max_tokens(client, tiny_entry):
    body = complete(client)
    assert body["id"].startswith("cmpl-")
    assert body["object"] == "text_completion"
    assert body["system_fingerprint"].startswith("fp_")
    (choice,) = body["choices"]
    assert (choice["index"], choice["finish_reason"], choice["logprobs"]) == (0, "length", None)
    assert body["usage"]["completion_tokens"] == 16  # OpenAI's default for this endpoint


@pytest.mark.parametrize(
    "prompt",
    [["Once upon", "A long time"], [[HELLO, 905], [HELLO]]],
    ids=["strings", "token-lists"],
)
def test_one_choice_per_prompt_times_n(client, tiny_entry, prompt):
    body = complete(client, prompt=prompt, n=2, max_tokens=3, temperature=1.0, seed=1)
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert body["usage"]["completion_tokens"] == 12


def test_token_prompt_equals_its_text(client, tiny_entry):
    as_tokens = complete(client, prompt=[HELLO, 905], max_tokens=4)
    as_text = complete(client, prompt="Hello world", max_tokens=4)
    assert as_tokens["choices"][0]["text"] == as_text["choices"][0]["text"]
    assert as_tokens["usage"]["prompt_tokens"] == 2


def test_echo_prepends_the_prompt(client, tiny_entry):
    plain = complete(client, max_tokens=3)["choices"][0]["text"]
    echoed = complete(client, max_tokens=3, echo=True)["choices"][0]["text"]
    assert echoed == "Once upon" + plain
    tokens = complete(client, prompt=[HELLO, 905], max_tokens=3, echo=True)["choices"][0]["text"]
    assert tokens.startswith("Hello world")


def test_legacy_logprobs_shape(client, tiny_entry):
    body = complete(client, max_tokens=4, logprobs=2)
    logprobs = body["choices"][0]["logprobs"]
    assert len(logprobs["tokens"]) == len(logprobs["token_logprobs"]) == 4
    assert "".join(logprobs["tokens"]) == body["choices"][0]["text"]
    offsets = logprobs["text_offset"]
    assert offsets[0] == 0
    assert offsets == [sum(len(t) for t in logprobs["tokens"][:i]) for i in range(4)]
    for token, top in zip(logprobs["tokens"], logprobs["top_logprobs"], strict=True):
        assert len(top) <= 2
        assert token in top  # greedy: the chosen token is among the best


def test_stop_in_legacy(client, tiny_entry):
    body = complete(client, logit_bias={str(HELLO): 100}, stop=["oH"], max_tokens=5)
    assert body["choices"][0]["text"] == "Hell"
    assert body["choices"][0]["finish_reason"] == "stop"


@pytest.mark.django_db(transaction=True)
def test_streamed_completion(tiny_dir):
    CatalogModel.objects.create(public_id="tiny", location=str(tiny_dir))

    async def go():
        body = {
            "model": "tiny",
            "prompt": ["Once upon", "Hi"],
            "stream": True,
            "echo": True,
            "max_tokens": 3,
            "temperature": 0,
            "logit_bias": NO_EOS,
            "stream_options": {"include_usage": True},
        }
        response = await AsyncClient().post(URL, body, content_type="application/json")
        return b"".join([c async for c in response.streaming_content]).decode()

    events = [e.removeprefix("data: ") for e in async_to_sync(go)().split("\n\n") if e]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    for c in chunks:  # the SDK's model wants a finish_reason, which streams leave null mid-way
        if not c["choices"] or c["choices"][0]["finish_reason"]:
            Completion.model_validate(c)
    assert {c["object"] for c in chunks} == {"text_completion"}
    texts = {0: "", 1: ""}
    finishes = {}
    for c in chunks[:-1]:
        (choice,) = c["choices"]
        texts[choice["index"]] += choice["text"]
        if choice["finish_reason"]:
            finishes[choice["index"]] = choice["finish_reason"]
    assert texts[0].startswith("Once upon") and texts[1].startswith("Hi")
    assert finishes == {0: "length", 1: "length"}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6
