"""Each sampling parameter has an effect: shown on the tiny random model, in-process."""

import json

import pytest
from openai.types.chat import ChatCompletion

from catalog.models import CatalogModel

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "Tell me something."}]
NO_EOS = {"2": -100}


@pytest.fixture
def tiny_entry(db, tiny_dir):
    return CatalogModel.objects.create(public_id="tiny", location=str(tiny_dir))


def ask(client, **body) -> dict:
    payload = {"model": "tiny", "messages": MESSAGES, "max_tokens": 12, "logit_bias": NO_EOS}
    response = client.post(CHAT, {**payload, **body}, content_type="application/json")
    assert response.status_code == 200, response.content
    ChatCompletion.model_validate(response.json())  # the official SDK's model of it
    return response.json()


def texts(body: dict) -> list[str]:
    return [c["message"]["content"] for c in body["choices"]]


def tokens(body: dict) -> list[str]:
    return [t["token"] for t in body["choices"][0]["logprobs"]["content"]]


def test_temperature_zero_is_greedy_and_deterministic(client, tiny_entry):
    assert texts(ask(client, temperature=0)) == texts(ask(client, temperature=0))


def test_temperature_above_zero_samples(client, tiny_entry):
    outputs = {texts(ask(client, temperature=1.5))[0] for _ in range(3)}
    assert len(outputs) > 1


def test_seed_reproduces_and_differs(client, tiny_entry):
    first = texts(ask(client, temperature=1.0, seed=7))
    assert texts(ask(client, temperature=1.0, seed=7)) == first
    assert texts(ask(client, temperature=1.0, seed=8)) != first


@pytest.mark.parametrize(
    "narrowing",
    [
        {"top_k": 1},
        {"top_p": 0.0},
        {"min_p": 1.0},
        {"top_p": 5e-324},  # 0 in float32: once masked every token, sampling uniformly
        {"top_p": 1e-9},  # far below any token's probability: only the top one is left
        {"temperature": 1e-300},  # 1/temperature overflows float32
    ],
)
def test_narrow_sampling_equals_greedy(client, tiny_entry, narrowing):
    greedy = texts(ask(client, temperature=0))
    assert texts(ask(client, **{"temperature": 1.5, "seed": 1, **narrowing})) == greedy


def test_top_p_and_top_k_change_sampling(client, tiny_entry):
    free = texts(ask(client, temperature=1.5, seed=3))
    assert texts(ask(client, temperature=1.5, seed=3, top_p=0.5)) != free
    assert texts(ask(client, temperature=1.5, seed=3, top_k=3)) != free


@pytest.mark.parametrize(
    "penalty", [{"frequency_penalty": 2.0}, {"presence_penalty": 2.0}, {"repetition_penalty": 5.0}]
)
def test_penalties_stop_repetition(client, tiny_entry, penalty):
    base = {"temperature": 0, "max_tokens": 24, "logprobs": True}
    plain = tokens(ask(client, **base))
    assert len(set(plain)) < len(plain)  # the random model loops under greedy decoding
    penalised = tokens(ask(client, **base, **penalty))
    assert len(set(penalised)) > len(set(plain))


def test_logit_bias_forces_a_token(client, tiny_entry):
    body = ask(client, temperature=0, logit_bias={"19556": 100}, max_tokens=3)
    assert texts(body) == ["HelloHelloHello"]


def test_stop_strings_end_the_reply(client, tiny_entry):
    body = ask(client, temperature=0, logit_bias={"19556": 100}, stop=["lo"], max_tokens=5)
    assert texts(body) == ["Hel"]
    assert body["choices"][0]["finish_reason"] == "stop"


def test_max_tokens_and_max_completion_tokens(client, tiny_entry):
    assert ask(client, max_tokens=3)["usage"]["completion_tokens"] == 3
    assert ask(client, max_tokens=9, max_completion_tokens=2)["usage"]["completion_tokens"] == 2


def test_n_gives_indexed_choices_and_counts_the_prompt_once(client, tiny_entry):
    one = ask(client, temperature=0)
    three = ask(client, n=3, temperature=1.0, seed=5)
    assert [c["index"] for c in three["choices"]] == [0, 1, 2]
    assert len(set(texts(three))) > 1
    assert three["usage"]["prompt_tokens"] == one["usage"]["prompt_tokens"]
    assert three["usage"]["completion_tokens"] == 36
    assert texts(ask(client, n=3, temperature=1.0, seed=5)) == texts(three)


def test_logprobs_shape(client, tiny_entry):
    body = ask(client, temperature=0, logprobs=True, top_logprobs=3, max_tokens=4)
    content = body["choices"][0]["logprobs"]["content"]
    assert len(content) == 4
    for entry in content:
        assert entry["bytes"] == list(entry["token"].encode())
        top = entry["top_logprobs"]
        assert len(top) == 3
        assert [t["logprob"] for t in top] == sorted((t["logprob"] for t in top), reverse=True)
        # Greedy: the chosen token is the most likely one.
        assert entry["token"] == top[0]["token"]
        assert entry["logprob"] == pytest.approx(top[0]["logprob"])
        assert entry["logprob"] <= 0
    assert "".join(t["token"] for t in content) == texts(body)[0]


def test_no_logprobs_unless_asked(client, tiny_entry):
    assert ask(client)["choices"][0]["logprobs"] is None


def test_user_is_accepted(client, tiny_entry):
    assert ask(client, user="someone-42")["usage"]["completion_tokens"] == 12


BOUNDED = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "color": {"enum": ["red", "green", "blue"]}},
    "required": ["ok", "color"],
    "additionalProperties": False,
}


def test_json_schema_output_validates_even_from_a_random_model(client, tiny_entry):
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": BOUNDED}}
    for seed in range(3):
        body = ask(
            client, response_format=fmt, temperature=1.0, seed=seed, max_tokens=40, logit_bias={}
        )
        answer = json.loads(texts(body)[0])
        assert isinstance(answer["ok"], bool)
        assert answer["color"] in {"red", "green", "blue"}
        assert set(answer) == {"ok", "color"}
        assert body["choices"][0]["finish_reason"] == "stop"


def test_json_object_output_is_an_object(client, tiny_entry):
    body = ask(
        client, response_format={"type": "json_object"}, temperature=0, max_tokens=60, logit_bias={}
    )
    text = texts(body)[0]
    assert text.startswith("{")
    if body["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(text), dict)


TOOLS = [
    {
        "type": "function",
        "function": {"name": "set_light", "parameters": BOUNDED},
    },
    {
        "type": "function",
        "function": {
            "name": "reset",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        },
    },
]


def test_tool_choice_required_forces_valid_calls(client, tiny_entry):
    body = ask(
        client,
        tools=TOOLS,
        tool_choice="required",
        temperature=0.8,
        seed=2,
        max_tokens=80,
        logit_bias={},
    )
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    calls = choice["message"]["tool_calls"]
    assert calls
    for call in calls:
        assert call["id"].startswith("call_")
        assert call["type"] == "function"
        assert call["function"]["name"] in {"set_light", "reset"}
        assert isinstance(json.loads(call["function"]["arguments"]), dict)


def test_named_tool_choice_forces_that_function(client, tiny_entry):
    choice = {"type": "function", "function": {"name": "set_light"}}
    body = ask(
        client,
        tools=TOOLS,
        tool_choice=choice,
        temperature=0.8,
        seed=4,
        max_tokens=40,
        logit_bias={},
    )
    (call,) = body["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "set_light"
    arguments = json.loads(call["function"]["arguments"])
    assert arguments["color"] in {"red", "green", "blue"}


def test_parallel_tool_calls_false_allows_one_call(client, tiny_entry):
    for seed in range(3):
        body = ask(
            client,
            tools=TOOLS,
            tool_choice="required",
            parallel_tool_calls=False,
            temperature=1.0,
            seed=seed,
            max_tokens=80,
            logit_bias={},
        )
        assert len(body["choices"][0]["message"]["tool_calls"]) == 1


def test_tool_choice_none_sends_plain_text(client, tiny_entry):
    body = ask(client, tools=TOOLS, tool_choice="none", temperature=0)
    assert "tool_calls" not in body["choices"][0]["message"]
    assert body["choices"][0]["message"]["content"] == texts(ask(client, temperature=0))[0]
