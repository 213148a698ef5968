"""The ids agents ask for: catalog aliases (exact and glob), the default model for unknown ids,
their precedence, API keys' model lists through them, /v1/models, the admin and add_model."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from catalog.aliases import best_match, globs_overlap
from catalog.models import CatalogModel
from tests.catalog.test_admin import form
from tests.edge.test_api_keys import bearer, make_key
from tests.support.helpers import CHAT, NO_EOS, assert_error

SONNET = "claude-sonnet-4-5-20250929"


@pytest.fixture
def pair(db, tiny_dir) -> tuple[CatalogModel, CatalogModel]:
    """Two catalog rows on the tiny model, told apart by their default max_tokens (2 and 3)."""
    big = CatalogModel.objects.create(
        public_id="big", location=str(tiny_dir), default_max_tokens=2, aliases=["claude-*"]
    )
    small = CatalogModel.objects.create(
        public_id="small",
        location=str(tiny_dir),
        default_max_tokens=3,
        aliases=["claude-haiku-*", "gpt-5-codex"],
    )
    return big, small


def served_by(client, model: str, **headers) -> str | int:
    """Which of the pair answered a chat for `model` (the status when none did)."""
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "logit_bias": NO_EOS}
    response = client.post(CHAT, body, content_type="application/json", **headers)
    if response.status_code != 200:
        return response.status_code
    assert response.json()["model"] == model  # the id the client sent, as OpenAI echoes it
    return {2: "big", 3: "small"}[response.json()["usage"]["completion_tokens"]]


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        ("claude-*", "claude-haiku-*", True),
        ("claude-*-4-5", "claude-sonnet-*", True),
        ("gpt-*", "claude-*", False),
        ("*-codex", "gpt-*", True),
        ("a*b", "a*c", False),
        ("x*", "*y", True),
    ],
)
def test_glob_overlap(a, b, overlap):
    assert globs_overlap(a, b) is overlap
    assert globs_overlap(b, a) is overlap


def test_precedence_exact_alias_then_longest_glob(pair):
    big, small = pair
    assert best_match("claude-haiku-4-5", [big, small]) is small  # 13 literal characters > 7
    assert best_match(SONNET, [big, small]) is big
    assert best_match("gpt-5-codex", [big, small]) is small
    big.aliases.append("claude-haiku-4-5")
    assert best_match("claude-haiku-4-5", [big, small]) is big  # exact beats any glob
    assert best_match("llama", [big, small]) is None


def test_aliases_resolve_with_precedence(client, pair):
    assert served_by(client, "big") == "big"
    assert served_by(client, SONNET) == "big"
    assert served_by(client, "claude-haiku-4-5-20251001") == "small"
    assert served_by(client, "gpt-5-codex") == "small"
    assert served_by(client, "gpt-5.1-codex-max") == 404


def test_the_model_own_id_wins_over_every_alias(client, pair, tiny_dir):
    CatalogModel.objects.create(
        public_id="claude-opus-4-1", location=str(tiny_dir), default_max_tokens=3
    )
    assert served_by(client, "claude-opus-4-1") == "small"  # its own row (max_tokens 3)
    assert served_by(client, "claude-opus-4-0") == "big"


def test_aliases_in_messages_and_responses(client, pair):
    message = {"model": SONNET, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}
    response = client.post("/v1/messages", message, content_type="application/json")
    assert response.status_code == 200, response.content
    assert response.json()["model"] == SONNET
    count = client.post("/v1/messages/count_tokens", message, content_type="application/json")
    assert count.status_code == 200
    body = {"model": "gpt-5-codex", "input": "Hi", "max_output_tokens": 16}
    response = client.post("/v1/responses", body, content_type="application/json")
    assert response.status_code == 200, response.content
    assert response.json()["model"] == "gpt-5-codex"
    assert_error(
        client.post("/v1/responses", {**body, "model": "o3"}, content_type="application/json"),
        404,
        "model",
        "model_not_found",
    )


def test_default_model_is_off_until_ticked(client, pair):
    big, _ = pair
    assert served_by(client, "mistral-large") == 404
    big.default_for_unknown_ids = True
    big.save()
    assert served_by(client, "mistral-large") == "big"
    assert served_by(client, "gpt-5-codex") == "small"  # aliases still come first
    big.enabled = False
    big.save()
    assert served_by(client, "mistral-large") == 404  # only enabled rows serve


def test_default_is_per_purpose(client, pair):
    big, _ = pair
    big.default_for_unknown_ids = True
    big.save()
    body = {"model": "text-embedding-3-small", "input": "Hi"}
    response = client.post("/v1/embeddings", body, content_type="application/json")
    assert_error(response, 404, "model", "model_not_found")


def test_key_limits_apply_to_the_model_an_alias_reaches(client, pair):
    big, small = pair
    big.default_for_unknown_ids = True
    big.save()
    key, secret = make_key()
    key.allowed_models.set([small])
    auth = bearer(secret)
    assert served_by(client, "claude-haiku-4-5", **auth) == "small"
    assert served_by(client, "gpt-5-codex", **auth) == "small"
    assert served_by(client, SONNET, **auth) == 403  # big's glob: not this key's model
    assert served_by(client, "mistral-large", **auth) == 404  # big is only the default
    assert served_by(client, "big", **auth) == 403
    ids = [m["id"] for m in client.get("/v1/models", **auth).json()["data"]]
    assert ids == ["small", "gpt-5-codex"]
    assert client.get(f"/v1/models/{SONNET}", **auth).status_code == 403


@pytest.mark.parametrize(
    ("aliases", "message"),
    [
        (["small"], "already names the model 'small'"),
        (["gpt-5-codex"], "already names the model 'small'"),
        (["claude-opus-*"], None),  # no id matches it and claude-sonnet-*
        (["*laude-haiku-4"], "equally specific"),  # 13 characters, as claude-haiku-*
        (["*"], "would match every id"),
        (["big"], "this model's own id"),
        (["a b"], "no spaces"),
        (["hf.co/owner/repo-GGUF:Q4_K_M"], None),  # a hub path, as an Ollama pull names it
        (["x", "x"], "listed twice"),
    ],
)
def test_conflicting_aliases_are_refused(pair, aliases, message):
    big, small = pair
    small.aliases = ["claude-haiku-*", "gpt-5-codex", "claude-sonnet-*"]
    small.save()
    big.aliases = aliases
    if message is None:
        big.full_clean()
        return
    with pytest.raises(ValidationError, match=message):
        big.full_clean()


def test_an_id_that_is_another_model_alias_is_refused(pair, tiny_dir):
    entry = CatalogModel(public_id="gpt-5-codex", location=str(tiny_dir))
    with pytest.raises(ValidationError, match="is an alias of the model 'small'"):
        entry.full_clean()


def test_one_default_per_purpose(pair):
    big, small = pair
    big.default_for_unknown_ids = True
    big.save()
    small.default_for_unknown_ids = True
    with pytest.raises(ValidationError, match="already the default for unknown ids"):
        small.full_clean()
    small.enabled = False
    small.full_clean()  # a disabled row may keep the flag


def test_models_list_aliases(client, pair):
    data = client.get("/v1/models").json()["data"]
    cards = {card["id"]: card for card in data}
    assert list(cards) == ["big", "small", "gpt-5-codex"]
    assert cards["big"]["aliases"] == ["claude-*"]
    assert "alias_of" not in cards["big"]
    assert cards["gpt-5-codex"]["alias_of"] == "small"
    one = client.get(f"/v1/models/{SONNET}").json()
    assert (one["id"], one["alias_of"]) == (SONNET, "big")
    assert client.get("/v1/models/small").json()["aliases"] == ["claude-haiku-*", "gpt-5-codex"]
    assert_error(client.get("/v1/models/o3"), 404, "model", "model_not_found")


def test_models_in_anthropic_shape(client, pair):
    headers = {"HTTP_ANTHROPIC_VERSION": "2023-06-01"}
    body = client.get("/v1/models", **headers).json()
    assert body["has_more"] is False
    assert (body["first_id"], body["last_id"]) == ("big", "gpt-5-codex")
    first = body["data"][0]
    assert set(first) == {"type", "id", "display_name", "created_at"}
    assert first["type"] == "model" and first["created_at"].endswith("Z")
    one = client.get("/v1/models/claude-haiku-4-5", **headers).json()
    assert (one["id"], one["display_name"]) == ("claude-haiku-4-5", "small")


def test_models_take_anthropic_x_api_key(client, pair):
    _, secret = make_key()
    assert client.get("/v1/models", HTTP_X_API_KEY=secret).status_code == 200
    assert client.get("/v1/models", HTTP_X_API_KEY="sk-nope").status_code == 401


def test_admin_edits_aliases_and_default(admin_client, pair, tiny_dir):
    big, small = pair
    url = f"/admin/catalog/catalogmodel/{big.pk}/change/"
    fields = {"public_id": "big", "location": str(tiny_dir), "default_max_tokens": "2"}
    response = admin_client.post(
        url,
        # One per line, as the admin's box takes them.
        form(**fields, aliases="claude-sonnet-*\nclaude-opus-4-1", default_for_unknown_ids="on"),
    )
    assert response.status_code == 302, response.content
    big.refresh_from_db()
    assert big.aliases == ["claude-sonnet-*", "claude-opus-4-1"] and big.default_for_unknown_ids
    refused = admin_client.post(url, form(**fields, aliases="gpt-5-codex"))
    assert refused.status_code == 200
    assert b"already names the model" in refused.content
    page = admin_client.get("/admin/catalog/catalogmodel/").content.decode()
    assert "claude-sonnet-*, claude-opus-4-1, (unknown ids)" in page
    small.default_for_unknown_ids = True
    small.enabled = False
    small.save()
    admin_client.post(
        "/admin/catalog/catalogmodel/",
        {"action": "enable", "_selected_action": [small.pk]},
    )
    small.refresh_from_db()
    assert not small.enabled  # two defaults of one purpose: refused


def test_add_model_takes_aliases(db, tiny_dir):
    call_command(
        "add_model",
        "local",
        "--local",
        str(tiny_dir),
        "--alias",
        "claude-*",
        "--alias",
        "gpt-5-codex",
        "--default-for-unknown-ids",
        "--context-overflow",
        "truncate_middle",
    )
    entry = CatalogModel.objects.get(public_id="local")
    assert entry.aliases == ["claude-*", "gpt-5-codex"]
    assert entry.default_for_unknown_ids
    assert entry.context_overflow == "truncate_middle"
    with pytest.raises(CommandError, match="already names the model 'local'"):
        call_command("add_model", "other", "--local", str(tiny_dir), "--alias", "gpt-5-codex")
