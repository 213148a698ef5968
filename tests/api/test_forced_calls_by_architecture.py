"""A forced tool call on every architecture of the matrix (tests/support/architectures.py): the
grammar constrains MoE, hybrid, MLA, sliding-window and chunked models alike, so a random-weight
model still writes the forced call, whole and parsed, through chat completions."""

from __future__ import annotations

import json

import pytest

from tests.support.architectures import ARCHITECTURES

# The catalog row is only read, and the grammar is the engine's: PostgreSQL would only repeat it.
pytestmark = pytest.mark.database_independent

FORCED = {"type": "function", "function": {"name": "get_weather"}}
# Closed choices: a random model would write a free string forever, so the grammar decides
# every character but the choice, and the call closes within max_tokens on any architecture.
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "London", "Tokyo"]},
                "days": {"type": "integer", "enum": [1, 3, 7]},
            },
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_a_forced_call_is_written_and_parsed(client, db, architecture_dir, name):
    from catalog.models import CatalogModel

    CatalogModel.objects.create(public_id=name, location=str(architecture_dir(name)))
    body = {
        "model": name,
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [WEATHER_TOOL],
        "tool_choice": FORCED,
        "max_tokens": 96,
        "temperature": 0,
    }
    response = client.post(
        "/v1/chat/completions", json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 200, response.content
    choice = response.json()["choices"][0]
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    arguments = json.loads(call["function"]["arguments"])
    assert arguments["city"] in ("Paris", "London", "Tokyo") and arguments["days"] in (1, 3, 7)
    # A random model need not end its turn after the call (the grammar lets it close the
    # turn, not makes it): "length" is its choice, the call parsed all the same.
    assert choice["finish_reason"] in ("tool_calls", "length")
