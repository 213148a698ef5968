"""Ollama's /api/ps and /api/show report the context a model is really served with: the
catalog's override when it has one (clients size their prompts by it), else the model's own."""

from __future__ import annotations

import pytest

from catalog.models import CatalogModel

TINY_OWN_CONTEXT = 512  # the tiny model's max_position_embeddings


@pytest.fixture
def models(db, tiny_dir) -> None:
    CatalogModel.objects.create(public_id="short", location=str(tiny_dir), context_length=256)
    CatalogModel.objects.create(public_id="own", location=str(tiny_dir))


def admin(settings) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {settings.ADMIN_TOKEN}"}


def shown_context(client, model: str) -> int:
    response = client.post("/api/show", {"model": model}, content_type="application/json")
    assert response.status_code == 200, response.content
    return response.json()["model_info"]["llama.context_length"]


def test_show_reports_the_catalogs_context(client, models):
    assert shown_context(client, "short") == 256
    assert shown_context(client, "own:latest") == TINY_OWN_CONTEXT


def test_ps_reports_the_context_the_loaded_model_serves(client, models, settings):
    for model in ("short", "own"):
        warmed = client.post(f"/control/models/{model}/warm", **admin(settings))
        assert warmed.status_code == 200, warmed.content
    try:
        running = client.get("/api/ps").json()["models"]
        contexts = {m["name"]: m["context_length"] for m in running}
        assert contexts["short:latest"] == 256
        assert contexts["own:latest"] == TINY_OWN_CONTEXT
        pool = client.get("/control/pool", **admin(settings)).json()["models"]
        assert {m["id"]: m["context_length"] for m in pool}["short"] == 256  # the engine's own
    finally:
        for model in ("short", "own"):
            client.post(f"/control/models/{model}/unload", **admin(settings))
