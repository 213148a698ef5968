"""The admin reaches the pool through catalog/pool_seam.py, which the inference app fills as
Django starts: the catalog never imports inference (tests/house/test_layout_limits.py)."""

from __future__ import annotations

import pytest

from catalog import pool_seam
from catalog.models import CatalogModel
from inference.pool_ops import EnginePool

CHANGELIST = "/admin/catalog/catalogmodel/"


def test_the_inference_app_fills_the_seam():
    assert isinstance(pool_seam.pool(), EnginePool)


def test_an_unfilled_seam_says_why(monkeypatch):
    monkeypatch.setattr(pool_seam, "_pool", None)
    with pytest.raises(pool_seam.PoolUnavailable, match="INSTALLED_APPS"):
        pool_seam.pool()


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_warm_and_unload_actions_go_through_the_seam(admin_client, tiny_dir):
    entry = CatalogModel.objects.create(public_id="tiny", location=str(tiny_dir))
    picked = {"_selected_action": [entry.pk]}
    # The engine outlives each test: a model of this id an earlier one warmed goes first.
    admin_client.post(CHANGELIST, {"action": "unload", **picked})
    assert pool_seam.loaded_model("tiny") is None
    warmed = admin_client.post(CHANGELIST, {"action": "warm", **picked}, follow=True)
    try:
        assert any(m.startswith("tiny: loaded in") for m in messages_of(warmed))
        assert pool_seam.loaded_model("tiny") is not None
        again = admin_client.post(CHANGELIST, {"action": "warm", **picked}, follow=True)
        assert "tiny: already loaded" in messages_of(again)
    finally:
        unloaded = admin_client.post(CHANGELIST, {"action": "unload", **picked}, follow=True)
    assert "tiny: unloaded" in messages_of(unloaded)
    assert pool_seam.loaded_model("tiny") is None


def test_a_refused_warm_is_the_pools_own_words(admin_client, tiny_dir):
    """A disabled model is not warmed: the API's refusal (404 model_not_found) reaches the
    admin as the seam's PoolRefused, its message shown on the page."""
    entry = CatalogModel.objects.create(public_id="off", location=str(tiny_dir), enabled=False)
    page = admin_client.post(
        CHANGELIST, {"action": "warm", "_selected_action": [entry.pk]}, follow=True
    )
    refused = [m for m in messages_of(page) if m.startswith("off: ")]
    assert refused == ["off: The model 'off' does not exist or is not enabled on this server."]
    assert pool_seam.loaded_model("off") is None
