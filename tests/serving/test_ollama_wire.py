"""Ollama's request fields read as this server needs them: model names with their tag,
keep_alive durations, options."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from inference.protocol.ollama.requests import ChatRequest, ShowRequest, duration_seconds

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        (0, 0.0),
        (300, 300.0),
        ("0", 0.0),
        ("-1", -1.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("250ms", 0.25),
        ("-1s", -1.0),
        ("1.5h", 5400.0),
    ],
)
def test_keep_alive_durations(given, seconds):
    assert duration_seconds(given) == seconds


@pytest.mark.parametrize("given", ["soon", "5 minutes", "m", "", "5d"])
def test_what_is_not_a_duration(given):
    with pytest.raises(ValueError):
        duration_seconds(given)


def test_latest_names_the_catalog_id_and_replies_keep_the_name():
    request = ChatRequest.model_validate({"model": "smollm2:latest"})
    assert (request.model, request.name, request.stream) == ("smollm2", "smollm2:latest", True)
    assert ChatRequest.model_validate({"model": "smollm2:q4"}).model == "smollm2:q4"
    assert ShowRequest.model_validate({"name": "old-client:latest"}).model == "old-client"


def test_options_are_typed_and_unknown_ones_ignored():
    request = ChatRequest.model_validate(
        {"model": "m", "options": {"stop": "END", "num_ctx": 2048, "use_mmap": True}}
    )
    assert request.sampling.stop == ["END"]
    with pytest.raises(ValidationError):
        ChatRequest.model_validate({"model": "m", "options": {"num_ctx": 0}})
    with pytest.raises(ValidationError):
        ChatRequest.model_validate({"model": "m", "keep_alive": "later"})
