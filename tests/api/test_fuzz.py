"""Bounded schemathesis fuzzing of our own /openapi.json against a real server and a tiny model.

Every generated request, valid or not, must get a non-5xx answer and leave the server healthy;
at the end the server must still run with no generation left behind. Deterministic
(derandomized, no example database) and small enough for CI on a 2-core machine.

`schemathesis.pytest.from_fixture` would be the natural integration, but schemathesis 4.32
sets `request.node._nodeid`, which pytest 9.2 no longer has; so each operation gets an explicit
Hypothesis test over `operation.as_strategy()`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok

from tests.support.live_server import LiveServer, live_server, on_postgres

MODEL_ID = "tiny"
EMBEDDING_ID = "tiny-embedder"
MAX_OUTPUT_TOKENS = 8
FUZZ_SETTINGS = settings(
    max_examples=30,  # per operation and generation mode
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

# The Files and Batch operations (issue 46) take ids and a few query parameters and never reach
# the engine (their bodies are forms or read by the view, not in the document): a few cases
# each cover them (tests/api/test_files_api.py and the batch modules test them whole).
FEW_SETTINGS = settings(FUZZ_SETTINGS, max_examples=4)
FEW = ("/v1/files", "/v1/batches", "/v1/messages/batches")

# The operations that store what a request says (stored responses): the only ones the
# PostgreSQL pass fuzzes again, as text PostgreSQL refuses (NUL bytes...) would fail there only.
STORED = "/v1/responses"

cases_run: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def hypothesis_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Hypothesis caches (even with database=None) go to a temporary directory, not the repo."""
    set_hypothesis_home_dir(tmp_path_factory.mktemp("hypothesis"))
    yield
    set_hypothesis_home_dir(None)


@pytest.fixture(scope="module")
def server(
    tiny_dir: Path, encoder_embedder_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    with fuzzed_server(tiny_dir, encoder_embedder_dir, tmp_path_factory.mktemp("fuzz")) as live:
        yield live


@contextmanager
def fuzzed_server(tiny_dir: Path, embedder_dir: Path, folder: Path) -> Iterator[LiveServer]:
    """A live server with the tiny chat model (8 tokens an answer) and the tiny embedder."""
    setup = ("add_model", MODEL_ID, "--local", str(tiny_dir))
    setup += ("--max-output-tokens", str(MAX_OUTPUT_TOKENS), "--context-length", "512")
    embedder = ("add_model", EMBEDDING_ID, "--embedding", "--local", str(embedder_dir))
    with live_server(folder, setup, embedder) as live:
        yield live


@pytest.fixture(scope="module")
def http(server: LiveServer) -> Iterator[requests.Session]:
    with requests.Session() as session:
        yield session


@pytest.fixture(scope="module")
def api_schema(server: LiveServer) -> schemathesis.BaseSchema:
    # No sanitization: it would print "max_tokens": "[Filtered]" in the curl reproductions.
    config = schemathesis.Config.from_dict(
        {"request-timeout": 30, "output": {"sanitization": {"enabled": False}}}
    )
    return schemathesis.openapi.from_url(f"{server.url}/openapi.json", config=config)


def usable(body: dict) -> dict:
    """Mends what the schema allows but the server refuses, leaving the other fields fuzzed.

    Without this nearly every schema-valid body is a 400 (empty message content or prompt, empty
    stop strings, non-numeric logit_bias keys, max_tokens over the model's 8...) and no request
    ever reaches the engine.
    """
    body = {**body, "model": MODEL_ID}
    if "messages" in body:
        body["messages"] = [{"role": "user", "content": "Say something."}]
        tools = body.get("tools") or []
        names = [function_name(tool) for tool in tools]
        if len(set(names)) != len(names):
            body["tools"] = list({function_name(tool): tool for tool in tools}.values())
        choice = body.get("tool_choice")
        if isinstance(choice, dict) and function_name(choice) not in names:
            body["tool_choice"] = "auto"
        if choice == "required" and not names:
            body["tool_choice"] = "none"
        if body.get("top_logprobs"):
            body["logprobs"] = True
    if "input" in body:  # /v1/responses
        body = responses_usable(body)
    if "prompt" in body:
        prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
        if not prompts or any(p in ("", []) for p in prompts):
            body["prompt"] = "Once upon a time"
        elif isinstance(prompts[0], int | list):  # token ids: keep them inside any vocabulary
            ids = [prompts] if isinstance(prompts[0], int) else prompts
            body["prompt"] = [[abs(i) % 1000 for i in p] for p in ids]
        body.pop("suffix", None)
        if body.get("best_of") is not None:
            body["best_of"] = body.get("n", 1)
        if body.get("echo") and body.get("logprobs") is not None:
            body["echo"] = False
        if body.get("max_tokens") is None:  # the default, 16, is over this model's limit
            body["max_tokens"] = MAX_OUTPUT_TOKENS
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        if isinstance(body.get(key), int):
            body[key] = 1 + (body[key] - 1) % MAX_OUTPUT_TOKENS
    if isinstance(body.get("stop"), list | str):
        stops = [body["stop"]] if isinstance(body["stop"], str) else body["stop"]
        body["stop"] = [stop for stop in stops if stop][:4] or None
    if isinstance(body.get("logit_bias"), dict):
        body["logit_bias"] = {k: v for k, v in body["logit_bias"].items() if k.isdigit()}
    return body


def function_name(tool: dict) -> str | None:
    """A Chat Completions tool's (or tool_choice's) name; OpenAI's spec also has custom tools."""
    return (tool.get("function") or tool.get("custom") or {}).get("name")


def responses_usable(body: dict) -> dict:
    """A Responses body that can succeed: a plain input, tools that tool_choice can name, no
    chain to a response that does not exist, no background mode."""
    body = {**body, "input": "Say something."}
    tools = body.get("tools") or []
    names = [tool.get("name") for tool in tools]
    if len(set(names)) != len(names):
        body["tools"] = list({tool.get("name"): tool for tool in tools}.values())
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("name") not in names:
        body["tool_choice"] = "auto"
    if choice == "required" and not names:
        body["tool_choice"] = "none"
    for key in ("previous_response_id", "background"):
        body.pop(key, None)
    return body


def usable_messages(body: dict) -> dict:
    """The same for Anthropic's Messages bodies (create and count_tokens)."""
    body = {**body, "model": MODEL_ID, "messages": [{"role": "user", "content": "Say something."}]}
    if isinstance(body.get("tools"), list):
        tools = {t.get("name"): {**t, "input_schema": {"type": "object"}} for t in body["tools"]}
        body["tools"] = list(tools.values())
    names = {tool.get("name") for tool in body.get("tools") or []}
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and (
        (choice.get("type") == "tool" and choice.get("name") not in names)
        or (choice.get("type") == "any" and not names)
    ):
        body["tool_choice"] = {"type": "auto"}
    body.pop("thinking", None)  # a budget of 1024 or more never fits under max_tokens <= 8
    if isinstance(body.get("max_tokens"), int):
        body["max_tokens"] = 1 + (body["max_tokens"] - 1) % MAX_OUTPUT_TOKENS
    return body


def aimed_at_tiny(case: schemathesis.Case, mode: GenerationMode) -> st.SearchStrategy:
    """Most bodies name the served model so that real generations happen; positive ones are
    also mended half of the time so that the engine sees fuzzed sampling fields."""
    body = case.body
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        return st.just(case)
    # Hypothesis favours the first choice (and shrinks towards it).
    aims = ["mended" if mode is GenerationMode.POSITIVE else "tiny"] * 2 + ["tiny", "as generated"]

    served = EMBEDDING_ID if case.operation.path == "/v1/embeddings" else MODEL_ID

    def aim(how: str) -> schemathesis.Case:
        case.body = body if how == "as generated" else {**body, "model": served}
        if how == "mended" and served == MODEL_ID:
            messages = case.operation.path.startswith("/v1/messages")
            case.body = usable_messages(body) if messages else usable(body)
        return case

    return st.sampled_from(aims).map(aim)


def check_case(case: schemathesis.Case, server: LiveServer, http: requests.Session) -> None:
    cases_run[case.operation.label] += 1
    try:
        response = case.call(session=http)
        case.validate_response(response, checks=[not_a_server_error])
        for probe in ("live", "ready"):  # ready: the engine did not die (and get restarted)
            health = http.get(f"{server.url}/health/{probe}", timeout=10)
            assert health.status_code == 200, f"/health/{probe} after the request: {health.text}"
    except BaseException as exc:
        exc.add_note(f"reproduce with: {case.as_curl_command()}")
        exc.add_note(f"server log (tail):\n{server.output()[-4000:]}")
        raise


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
def test_no_server_errors(
    mode: GenerationMode,
    api_schema: schemathesis.BaseSchema,
    server: LiveServer,
    http: requests.Session,
) -> None:
    operations, schema_errors = [], []
    for result in api_schema.get_all_operations():
        (operations if isinstance(result, Ok) else schema_errors).append(result)
    assert not schema_errors, [str(error.err()) for error in schema_errors]
    assert len(operations) >= 4
    for result in operations:
        operation = result.ok()
        if on_postgres() and not operation.path.startswith(STORED):
            continue  # the same code as on SQLite, fuzzed there

        @(FEW_SETTINGS if operation.path.startswith(FEW) else FUZZ_SETTINGS)
        @given(
            case=operation.as_strategy(generation_mode=mode).flatmap(
                lambda case: aimed_at_tiny(case, mode)
            )
        )
        def fuzz(case: schemathesis.Case) -> None:
            check_case(case, server, http)

        try:
            fuzz()
        except Unsatisfiable as exc:
            # The GET operations take no body and only unconstrained strings, which leaves
            # Hypothesis no invalid request to make.
            if mode is GenerationMode.POSITIVE or operation.body:
                exc.add_note(f"operation: {operation.label}")
                raise


def assert_survived(server: LiveServer, cases: Counter) -> None:
    """After a fuzzing module: it ran cases, the server is alive, nothing it was asked is
    still generating, and its engine never restarted."""
    print(f"fuzzed cases: {dict(cases)}")
    assert cases, "the fuzzing tests ran no case"
    assert server.process.poll() is None, f"server died:\n{server.output()}"
    deadline = time.monotonic() + 5
    while (health := server.health())["running_sequences"] or health.get("queued_sequences"):
        assert time.monotonic() < deadline, f"generations leaked: {health}\n{server.output()}"
        time.sleep(0.1)
    assert not health.get("engine_restarts"), f"the engine restarted: {health}\n{server.output()}"


def test_server_survived_without_leaks(server: LiveServer) -> None:
    assert_survived(server, cases_run)
