"""The dashboard's loaded-models table says what a model's stored weights are: "stored" alone
did not (4-bit? bfloat16?). The tiny model quantized as mlx-lm writes it, added through the
admin to compute in its stored format; unloaded and taken out of the catalog again at the end,
so that the other pages' tests find the catalog as they left it."""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import BrowserContext, expect

from tests.operations.browser.support import WAIT_MS, screenshot
from tests.support.helpers import quantize_model_dir

STORED = "tiny-stored-q4"
FORGET = (
    "from catalog.models import CatalogModel; "
    f"CatalogModel.objects.filter(public_id='{STORED}').delete()"
)


@pytest.mark.usefixtures("page")  # the superuser's login, which the context keeps
def test_the_weights_cell_says_what_is_stored(
    context: BrowserContext, problems, server, shots, tiny_dir, tmp_path
):
    folder = quantize_model_dir(tiny_dir, tmp_path / "tiny-4bit")
    page = problems.watch(context.new_page())  # the context's login
    try:
        page.goto("/admin/catalog/catalogmodel/add/")
        page.fill("#id_public_id", STORED)
        page.select_option("#id_source", "local")
        page.fill("#id_location", str(folder))
        page.select_option("#id_compute_format", "quantized")  # the stored weights
        page.click("input[name=_save]")
        expect(page.locator(".messagelist .success")).to_contain_text(STORED)
        warm = f"{server.url}/control/models/{STORED}/warm"
        assert httpx.post(warm, headers=server.admin_headers, timeout=60).status_code == 200
        page.goto("/")
        row = page.locator(f'#loaded-models tr[data-model="{STORED}"]')
        # The third cell, Weights: the format, what is stored, and the kernels where they run.
        weights = row.locator("td").nth(2)
        expect(weights).to_have_text(
            re.compile(r"^stored · 4-bit g32( · CPU kernels.*)?$"), timeout=WAIT_MS
        )
        screenshot(page, shots, "31-dashboard-weights-stored-4bit")
    finally:
        page.close()
        unload = f"{server.url}/control/models/{STORED}/unload"
        httpx.post(unload, headers=server.admin_headers, timeout=30)
        server.manage("shell", "-c", FORGET)
