"""LoRA adapters in the catalog: a row of source "lora" over a base model (add_model --adapter,
admin), served under its own id beside its base (engine/lora.py shares the weights)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from catalog.models import CatalogModel
from tests.support.helpers import CHAT, make_adapter


@pytest.fixture(scope="module")
def adapter_dir(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_adapter(tiny_dir, tmp_path_factory.mktemp("lora") / "adapter")


def add(*args: str) -> None:
    call_command("add_model", *args, stdout=io.StringIO())


def answer(client, model: str) -> str:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Tell me about foxes"}],
        "max_tokens": 8,
        "temperature": 0,
        "logit_bias": {"2": -100},
    }
    response = client.post(CHAT, body, content_type="application/json")
    assert response.status_code == 200, response.content
    assert response.json()["model"] == model
    return response.json()["choices"][0]["message"]["content"]


def test_an_adapter_is_served_beside_its_base(client, tiny_entry, adapter_dir):
    add("tiny-lora", "--adapter", str(adapter_dir), "--base", "tiny")
    entry = CatalogModel.objects.get(public_id="tiny-lora")
    assert entry.source == CatalogModel.Source.LORA and entry.base_model == tiny_entry
    spec = entry.spec()
    assert spec.location == str(adapter_dir) and spec.base == tiny_entry.spec()
    base_before = answer(client, "tiny")
    adapted = answer(client, "tiny-lora")
    assert adapted != base_before
    assert answer(client, "tiny") == base_before  # the base, loaded beside it, is unchanged
    listed = {m["id"] for m in client.get("/v1/models").json()["data"]}
    assert {"tiny", "tiny-lora"} <= listed


def test_add_model_refuses_what_is_not_an_adapter_over_a_chat_model(tiny_entry, adapter_dir):
    with pytest.raises(CommandError, match="--adapter DIR and --base ID go together"):
        add("x", "--adapter", str(adapter_dir))
    with pytest.raises(CommandError, match="no catalog model 'nope'"):
        add("x", "--adapter", str(adapter_dir), "--base", "nope")
    with pytest.raises(CommandError, match=r"has no adapter_config\.json"):
        add("x", "--adapter", str(adapter_dir.parent), "--base", "tiny")
    add("tiny-lora", "--adapter", str(adapter_dir), "--base", "tiny")
    with pytest.raises(CommandError, match="not an adapter itself"):
        add("x", "--adapter", str(adapter_dir), "--base", "tiny-lora")


def test_the_admin_adds_an_adapter(admin_client, tiny_entry, adapter_dir):
    from tests.catalog.test_admin import ADD_URL, form

    fields = form(public_id="admin-lora", source="lora", location=str(adapter_dir))
    refused = admin_client.post(ADD_URL, fields)
    assert b"A LoRA adapter needs its base model." in refused.content
    response = admin_client.post(ADD_URL, {**fields, "base_model": str(tiny_entry.pk)})
    assert response.status_code == 302, response.content
    assert CatalogModel.objects.get(public_id="admin-lora").base_model == tiny_entry
