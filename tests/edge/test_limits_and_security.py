"""Limits on what one request may ask, the queue cap, and what a request can never reach."""

import pytest
from django.test import Client

from inference.runtime import engine_handle, get_supervisor
from tests.support.helpers import CHAT, SHORT_CHAT, assert_error

BODY = SHORT_CHAT


def post(client: Client, body: dict, url: str = CHAT):
    return client.post(url, body, content_type="application/json")


def test_too_many_messages(client, tiny_entry, settings):
    settings.MAX_MESSAGES = 4
    messages = [{"role": "user", "content": "Hi"}] * 5
    assert_error(post(client, {**BODY, "messages": messages}), 400, "messages", "too_many_messages")
    assert post(client, {**BODY, "messages": messages[:4]}).status_code == 200


def test_max_tokens_is_capped_by_the_catalog(client, tiny_entry):
    tiny_entry.max_output_tokens = 5
    tiny_entry.save()
    error = assert_error(
        post(client, {**BODY, "max_tokens": 6}), 400, "max_tokens", "invalid_value"
    )
    assert "at most 5" in error["message"]
    legacy = post(client, {"model": "tiny", "prompt": "Hi", "max_tokens": 50}, "/v1/completions")
    assert_error(legacy, 400, "max_tokens", "invalid_value")
    body = {k: v for k, v in BODY.items() if k != "max_tokens"}
    answer = post(client, body).json()  # no max_tokens: the catalog's limit applies
    assert answer["usage"]["completion_tokens"] == 5
    assert answer["choices"][0]["finish_reason"] == "length"


def test_oversized_body_is_a_413(client, tiny_entry, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    big = {**BODY, "messages": [{"role": "user", "content": "x" * 2000}]}
    assert_error(post(client, big), 413)


def test_full_queue_is_a_429_with_retry_after(client, tiny_entry, monkeypatch):
    admission = get_supervisor().admission
    monkeypatch.setattr(admission, "max_queued", 2)
    admission.live += 1  # one sequence of another request waits (and never decodes here)
    try:
        refused = post(client, {**BODY, "n": 2})  # two more waiting: room for one
    finally:
        admission.live -= 1
    error = assert_error(refused, 429, None, "queue_full")
    assert error["type"] == "rate_limit_error"
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert post(client, {**BODY, "n": 2}).status_code == 200
    assert admission.live == 0  # every admitted sequence was given back


def test_more_sequences_than_the_queue_holds_is_a_400_not_a_429(client, tiny_entry, monkeypatch):
    admission = get_supervisor().admission
    monkeypatch.setattr(admission, "max_queued", 2)
    error = assert_error(post(client, {**BODY, "n": 3}), 400, "n")  # could never fit
    assert "at most 2" in error["message"]
    assert admission.live == 0


@pytest.mark.parametrize(
    ("limits", "setting"),
    [
        ({"MAX_REQUEST_SEQUENCES": 8}, "MAX_REQUEST_SEQUENCES"),
        ({"MAX_QUEUED_REQUESTS": 4}, "MAX_QUEUED_REQUESTS"),
    ],
)
def test_a_request_past_the_sequence_limit_names_the_setting(
    client, tiny_entry, settings, limits, setting
):
    for name, value in limits.items():
        setattr(settings, name, value)
    body = {"model": "tiny", "prompt": ["a", "b", "c"], "n": 3, "max_tokens": 2}
    response = client.post("/v1/completions", body, content_type="application/json")
    error = assert_error(response, 400, "n", "too_many_sequences")
    assert "9 sequences" in error["message"] and setting in error["message"]


@pytest.mark.parametrize(
    "model",
    [
        "../../etc/passwd",
        "/etc/passwd",
        "/tmp",
        "~/models/llama",
        "mlx-community/Llama-3.2-1B-Instruct-4bit",
        "tiny/../tiny",
        "file:///etc/passwd",
        "https://huggingface.co/org/repo",
    ],
)
def test_a_request_reaches_only_enabled_catalog_entries(client, tiny_entry, model):
    loaded_before = engine_handle().health().loaded_ids
    assert_error(post(client, {**BODY, "model": model}), 404, "model", "model_not_found")
    legacy = post(client, {"model": model, "prompt": "Hi"}, "/v1/completions")
    assert_error(legacy, 404, "model", "model_not_found")
    assert engine_handle().health().loaded_ids == loaded_before


def test_a_disabled_entry_is_unreachable_even_by_its_id(client, tiny_entry):
    tiny_entry.enabled = False
    tiny_entry.save()
    assert_error(post(client, BODY), 404, "model", "model_not_found")


@pytest.mark.parametrize(
    "url",
    [
        "/admin/",
        "/admin/catalog/catalogmodel/",
        "/admin/apikeys/apikey/",
        "/admin/apikeys/apikey/add/",
    ],
)
def test_admin_pages_require_login(client, db, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("get", "/control/pool"),
        ("post", "/control/models/tiny/warm"),
        ("post", "/control/models/tiny/unload"),
        ("post", "/control/engine/fault"),
    ],
)
def test_control_api_requires_the_admin_token_or_staff(client, tiny_entry, method, url):
    assert getattr(client, method)(url).status_code == 401
    wrong = getattr(client, method)(url, HTTP_AUTHORIZATION="Bearer not-the-token")
    assert wrong.status_code == 401


def test_fault_injection_is_off_unless_configured(client, tiny_entry, settings):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {settings.ADMIN_TOKEN}"}
    response = client.post(
        "/control/engine/fault", {"kind": "crash"}, content_type="application/json", **auth
    )
    assert response.status_code == 404
    assert engine_handle().health().restarts == 0


def test_health_endpoints(client, db, settings):
    assert client.get("/health/live").json() == {"status": "ok"}
    assert client.get("/health/ready").status_code == 200
    token = {"HTTP_AUTHORIZATION": f"Bearer {settings.ADMIN_TOKEN}"}
    health = client.get("/health", **token).json()
    assert health["engine_restarts"] == 0 and health["draining"] is False


def test_not_ready_while_draining(client, db, monkeypatch, settings):
    from inference.serving.drain import drain

    monkeypatch.setattr(drain, "draining", True)
    token = {"HTTP_AUTHORIZATION": f"Bearer {settings.ADMIN_TOKEN}"}
    response = client.get("/health/ready", **token)
    assert response.status_code == 503
    assert response.json()["reasons"] == ["shutting down"]
    assert client.get("/health/ready").json() == {"status": "unavailable"}  # why: operators
    assert client.get("/health/live").status_code == 200


def test_no_generation_starts_while_draining(client, tiny_entry, monkeypatch):
    from inference.serving.drain import drain

    monkeypatch.setattr(drain, "draining", True)
    error = assert_error(post(client, BODY), 503, None, "shutting_down")
    assert error["type"] == "server_error"
    assert client.get("/v1/models").status_code == 200  # reads still work


def test_legacy_default_of_16_tokens_yields_to_the_catalog_limit(client, tiny_entry):
    tiny_entry.max_output_tokens = 4
    tiny_entry.save()
    body = {"model": "tiny", "prompt": "Hi", "temperature": 0, "logit_bias": {"2": -100}}
    answer = post(client, body, "/v1/completions").json()
    assert answer["usage"]["completion_tokens"] == 4


@pytest.mark.parametrize("top_k", [49151, 49152, 10**6])
def test_top_k_beyond_the_vocabulary_keeps_every_token(client, tiny_entry, top_k):
    """Found by schemathesis: mlx-lm raised inside the shared decode step."""
    assert post(client, {**BODY, "top_k": top_k, "temperature": 1}).status_code == 200


def test_a_request_whose_sampler_fails_is_refused_alone(client, tiny_entry, monkeypatch):
    from inference.engine import sampling

    real = sampling.make_row_sampler

    def picky(params):
        if params.temperature == 1.5:
            raise ValueError("temperature 1.5 is not supported by this sampler")
        return real(params)

    monkeypatch.setattr(sampling, "make_row_sampler", picky)
    error = assert_error(post(client, {**BODY, "temperature": 1.5}), 400)
    assert "cannot be applied" in error["message"]
    assert post(client, BODY).status_code == 200
