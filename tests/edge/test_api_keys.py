"""API keys: who may call /v1, which models they see, how many requests they may run."""

import logging

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.test import AsyncClient

from apikeys.models import ApiKey
from catalog.models import CatalogModel
from tests.support.helpers import CHAT, SHORT_CHAT, assert_error

BODY = SHORT_CHAT


def make_key(name="ci", **fields) -> tuple[ApiKey, str]:
    key = ApiKey(name=name, **fields)
    secret = key.new_secret()
    key.save()
    return key, secret


def bearer(secret: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def test_required_by_setting_before_any_key_exists(client, tiny_entry, settings):
    settings.REQUIRE_API_KEY = True
    response = client.get("/v1/models")
    error = assert_error(response, 401, code="invalid_api_key")
    assert "Authorization: Bearer" in error["message"]
    assert response["WWW-Authenticate"] == "Bearer"
    assert_error(
        client.post(CHAT, BODY, content_type="application/json"), 401, None, "invalid_api_key"
    )


def test_open_without_keys_when_not_required(client, tiny_entry):
    assert client.get("/v1/models", **bearer("sk-anything")).status_code == 200
    assert client.get("/v1/models").status_code == 200


def test_once_a_key_exists_it_is_required(client, tiny_entry):
    _, secret = make_key()
    assert_error(client.get("/v1/models"), 401, code="invalid_api_key")
    wrong = client.get("/v1/models", **bearer(secret[:-1] + ("x" if secret[-1] != "x" else "y")))
    assert_error(wrong, 401, code="invalid_api_key")
    assert "sk-mlx" not in wrong.content.decode()  # not even a masked echo
    assert_error(
        client.get("/v1/models", HTTP_AUTHORIZATION=f"Basic {secret}"), 401, None, "invalid_api_key"
    )
    ok = client.post(CHAT, BODY, content_type="application/json", **bearer(secret))
    assert ok.status_code == 200, ok.content


def test_inactive_keys_are_refused_and_last_used_is_recorded(client, tiny_entry):
    key, secret = make_key()
    assert client.get("/v1/models", **bearer(secret)).status_code == 200
    key.refresh_from_db()
    assert key.last_used is not None
    key.active = False
    key.save()
    assert_error(client.get("/v1/models", **bearer(secret)), 401, code="invalid_api_key")


def test_only_a_hash_is_stored(db):
    key, secret = make_key()
    stored = ApiKey.objects.filter(pk=key.pk).values().get()
    assert secret not in str(stored)
    assert key.matches(secret) and not key.matches(secret + "x")
    assert secret.startswith("sk-mlx-") and len(secret) > 40


def test_a_key_sees_and_uses_only_its_models(client, tiny_entry, tiny_dir):
    CatalogModel.objects.create(public_id="other", location=str(tiny_dir))
    key, secret = make_key()
    key.allowed_models.set([tiny_entry])
    listed = client.get("/v1/models", **bearer(secret)).json()
    assert [m["id"] for m in listed["data"]] == ["tiny"]
    # A model that exists but is not the key's is refused as such (403, OpenAI's code), never
    # answered like a typo (404).
    retrieved = client.get("/v1/models/other", **bearer(secret))
    assert_error(retrieved, 403, "model", "model_not_found")
    refused = client.post(
        CHAT, {**BODY, "model": "other"}, content_type="application/json", **bearer(secret)
    )
    error = assert_error(refused, 403, "model", "model_not_found")
    assert error["message"].startswith("The API key `ci` does not have access to model `other`")
    missing = client.post(
        CHAT, {**BODY, "model": "nope"}, content_type="application/json", **bearer(secret)
    )
    assert_error(missing, 404, "model", "model_not_found")
    assert "does not exist" in missing.json()["error"]["message"]
    _, open_secret = make_key("open")
    assert len(client.get("/v1/models", **bearer(open_secret)).json()["data"]) == 2


@pytest.mark.django_db(transaction=True)
def test_per_key_concurrency_cap(tiny_dir):
    CatalogModel.objects.create(public_id="tiny", location=str(tiny_dir))
    _, secret = make_key(max_concurrent_requests=1)
    auth = {"Authorization": f"Bearer {secret}"}

    async def go():
        client = AsyncClient()
        stream = await client.post(
            CHAT,
            {**BODY, "stream": True, "max_tokens": 8},
            content_type="application/json",
            headers=auth,
        )
        assert stream.status_code == 200
        second = await client.post(CHAT, BODY, content_type="application/json", headers=auth)
        text = b"".join([c async for c in stream.streaming_content]).decode()
        third = await client.post(CHAT, BODY, content_type="application/json", headers=auth)
        return second, text, third

    second, text, third = async_to_sync(go)()
    error = assert_error(second, 429, None, "concurrency_limit_exceeded")
    assert error["type"] == "rate_limit_error"
    assert second["Retry-After"] == "1"
    assert text.endswith("data: [DONE]\n\n")
    assert third.status_code == 200  # the finished stream gave its slot back


def test_create_api_key_command_prints_the_secret_once(db, capsys, tiny_entry):
    call_command("create_api_key", "ci-bot", "--model", "tiny", "--max-concurrent", "2")
    out, err = capsys.readouterr()
    secret = out.strip()
    key = ApiKey.objects.get(name="ci-bot")
    assert key.matches(secret)
    assert [m.public_id for m in key.allowed_models.all()] == ["tiny"]
    assert key.max_concurrent_requests == 2
    assert secret not in err
    with pytest.raises(Exception, match="already exists"):
        call_command("create_api_key", "ci-bot")


def test_admin_shows_the_secret_once_and_never_again(admin_client, tiny_entry, caplog):
    caplog.set_level(logging.DEBUG)
    page = admin_client.post(
        "/admin/apikeys/apikey/add/",
        {"name": "web", "active": "on", "max_concurrent_requests": "", "allowed_models": []},
    )
    assert page.status_code == 200, page.content
    assert "no-store" in page["Cache-Control"]
    html = page.content.decode()
    secret = html.split('id="api-key-secret"')[1].split(">")[1].split("<")[0]
    key = ApiKey.objects.get(name="web")
    assert key.matches(secret)
    changelist = admin_client.get("/admin/apikeys/apikey/").content.decode()
    change = admin_client.get(f"/admin/apikeys/apikey/{key.pk}/change/").content.decode()
    assert key.lookup in changelist  # the prefix identifies the key...
    for text in (changelist, change, caplog.text):
        assert secret not in text  # ...the secret itself is never shown again
        assert secret[len(key.lookup) :] not in text


def test_secrets_never_reach_the_logs(client, tiny_entry, caplog):
    caplog.set_level(logging.DEBUG)
    _, secret = make_key()
    client.post(CHAT, BODY, content_type="application/json", **bearer(secret))
    client.post(CHAT, {"model": 5}, content_type="application/json", **bearer(secret))
    client.get("/v1/models", **bearer(secret + "wrong"))
    assert secret not in caplog.text


def test_cors_is_off_by_default_and_configurable(client, tiny_entry, settings):
    origin = {"HTTP_ORIGIN": "https://chat.example"}
    assert "Access-Control-Allow-Origin" not in client.get("/v1/models", **origin)
    settings.CORS_ALLOWED_ORIGINS = ["https://chat.example"]
    preflight = client.options(
        "/v1/chat/completions",
        HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST",
        HTTP_ACCESS_CONTROL_REQUEST_HEADERS="authorization, content-type",
        **origin,
    )
    assert preflight.status_code == 200
    assert preflight["Access-Control-Allow-Origin"] == "https://chat.example"
    assert "authorization" in preflight["Access-Control-Allow-Headers"]
    assert client.get("/admin/login/", **origin).get("Access-Control-Allow-Origin") is None
