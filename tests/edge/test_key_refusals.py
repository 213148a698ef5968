"""A key whose model list leaves out a model that exists is told so, in each dialect's own error
shape, and never as a typo: 403 "The API key `x` does not have access to model `m`" (OpenAI's
wording for a project without access, code model_not_found; Anthropic's permission_error;
Ollama's {"error": ...}), while a name no model has stays a 404."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from apikeys.models import ApiKey
from catalog.models import CatalogModel
from tests.edge.test_api_keys import bearer, make_key
from tests.support.helpers import CHAT, assert_error

HELLO = [{"role": "user", "content": "Hi"}]
REFUSAL = "The API key `limited` does not have access to model `{}`"


@pytest.fixture
def limited(db, tiny_entry, tiny_dir) -> dict:
    """A key that may use `tiny` only, beside `other` (aliased `gpt-4o-mini`)."""
    CatalogModel.objects.create(public_id="other", location=str(tiny_dir), aliases=["gpt-4o-mini"])
    key, secret = make_key("limited")
    key.allowed_models.set([tiny_entry])
    return bearer(secret)


def post(client, path: str, body: dict, auth: dict, **headers):
    return client.post(path, body, content_type="application/json", **auth, **headers)


@pytest.mark.parametrize("model", ["other", "gpt-4o-mini"])
def test_openai_says_the_key_may_not_use_it(client, limited, model):
    refused = post(client, CHAT, {"model": model, "messages": HELLO, "max_tokens": 1}, limited)
    error = assert_error(refused, 403, "model", "model_not_found")
    assert error["message"].startswith(REFUSAL.format(model))
    assert error["type"] == "invalid_request_error"
    missing = post(client, CHAT, {"model": "nope", "messages": HELLO, "max_tokens": 1}, limited)
    error = assert_error(missing, 404, "model", "model_not_found")
    assert "does not exist" in error["message"] and "API key" not in error["message"]
    retrieved = client.get(f"/v1/models/{model}", **limited)
    assert_error(retrieved, 403, "model", "model_not_found")


def test_anthropic_says_it_as_a_permission_error(client, limited):
    body = {"model": "other", "max_tokens": 1, "messages": HELLO}
    refused = post(client, "/v1/messages", body, limited, HTTP_ANTHROPIC_VERSION="2023-06-01")
    assert refused.status_code == 403, refused.content
    payload = refused.json()
    assert payload["type"] == "error" and payload["error"]["type"] == "permission_error"
    assert payload["error"]["message"].startswith(REFUSAL.format("other"))
    body["model"] = "nope"
    missing = post(client, "/v1/messages", body, limited, HTTP_ANTHROPIC_VERSION="2023-06-01")
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "not_found_error"


@pytest.mark.parametrize("path", ["/api/chat", "/api/show"])
def test_ollama_says_it_in_its_error_body(client, limited, path):
    body = {"model": "other:latest", "messages": HELLO, "stream": False}
    refused = post(client, path, body, limited)
    assert refused.status_code == 403, refused.content
    assert set(refused.json()) == {"error"}
    # Ollama's `other:latest` is the catalog's `other` (protocol/ollama/requests.catalog_id).
    assert refused.json()["error"].startswith(REFUSAL.format("other"))
    missing = post(client, path, {**body, "model": "nope"}, limited)
    assert missing.status_code == 404 and "does not exist" in missing.json()["error"]


def test_the_default_for_unknown_ids_stays_a_404_for_a_key_without_it(client, limited):
    CatalogModel.objects.filter(public_id="other").update(default_for_unknown_ids=True)
    missing = post(client, CHAT, {"model": "nope", "messages": HELLO, "max_tokens": 1}, limited)
    assert_error(missing, 404, "model", "model_not_found")  # `nope` names no model itself


def test_create_api_key_takes_the_names_the_api_takes(db, limited, capsys):
    call_command("create_api_key", "aliased", "--model", "gpt-4o-mini", "--model", "tiny:latest")
    key = ApiKey.objects.get(name="aliased")
    assert sorted(m.public_id for m in key.allowed_models.all()) == ["other", "tiny"]
    with pytest.raises(CommandError, match="not in the catalog: gpt-nope"):
        call_command("create_api_key", "typo", "--model", "gpt-nope")
