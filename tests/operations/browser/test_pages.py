"""The operator's pages in a real browser: the admin adds the tiny model, the dashboard warms it,
the admin imports the demo model from an Ollama folder.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from playwright.sync_api import expect

from tests.operations.browser.support import WAIT_MS, screenshot
from tests.support.gguf_layouts import SMOLLM_SYSTEM, add_smollm


def test_admin_adds_the_model_to_the_catalog(page, tiny_model, server):
    page.goto("/admin/catalog/catalogmodel/")
    expect(page.locator("#result_list tbody")).to_contain_text(tiny_model)
    models = httpx.get(f"{server.api}/models", timeout=10).json()["data"]
    assert tiny_model in [model["id"] for model in models]


def test_the_dashboard_is_for_staff_only(browser, server, problems, shots):
    context = browser.new_context(base_url=server.url)
    try:
        anonymous = problems.watch(context.new_page())
        anonymous.goto("/")
        expect(anonymous).to_have_url(re.compile(r"/admin/login/\?next=/$"))
        expect(anonymous.locator("#id_username")).to_be_visible()
        screenshot(anonymous, shots, "04-dashboard-logged-out")
    finally:
        context.close()


def test_dashboard_warms_the_model(page, tiny_model, server, shots):
    # The chat tests before this one may have loaded it: start from unloaded.
    unload = f"{server.url}/control/models/{tiny_model}/unload"
    assert httpx.post(unload, headers=server.admin_headers, timeout=30).status_code == 200
    page.goto("/")
    row = page.locator(f'#catalog tr[data-model="{tiny_model}"]')
    expect(row.locator(".status")).to_have_text("not loaded", timeout=WAIT_MS)
    expect(page.locator(f'#loaded-models tr[data-model="{tiny_model}"]')).to_have_count(0)
    expect(page.locator("#engine-state")).to_have_text(re.compile(r"^ready"))
    expect(page.locator("#backend")).to_contain_text("BLAS")
    expect(page.locator("#backend")).to_contain_text("CPU kernels: avx")
    expect(row.locator("button.unload")).to_be_disabled()
    screenshot(page, shots, "05-dashboard-not-loaded")

    row.locator("button.warm").click()
    expect(row.locator(".status")).to_have_text("loaded", timeout=WAIT_MS)
    loaded = page.locator(f'#loaded-models tr[data-model="{tiny_model}"]')
    expect(loaded).to_be_visible(timeout=WAIT_MS)
    # Its KV cache as the engine keeps it, and the context it serves, beside its format.
    expect(loaded.locator("td").nth(3)).to_have_text(re.compile(r"^(float16|native)$"))
    expect(loaded.locator("td").nth(4)).to_have_text(re.compile(r"^\d+ tokens$"))
    expect(row.locator("button.warm")).to_be_disabled()
    expect(row.locator("button.unload")).to_be_enabled()
    for card in ("#running", "#queued", "#tokens-per-second"):
        expect(page.locator(card)).to_have_text(re.compile(r"^\d+(\.\d+)?$"))
    screenshot(page, shots, "06-dashboard-loaded")


def test_admin_imports_a_model_from_ollama(page, server, shots, demo_gguf):
    """The import page lists what Ollama pulled; one click converts it in the background, the
    GGUF import list follows it to done, and the model is served with Ollama's defaults."""
    add_smollm(Path(server.env["OLLAMA_MODELS_DIR"]), demo_gguf)
    page.goto("/admin/catalog/ggufimport/")
    page.click("#import-from-sources")
    expect(page.locator("h1")).to_have_text("Import from Ollama / LM Studio")
    row = page.locator('#ollama-models tr[data-name="smollm2:latest"]')
    expect(row).to_contain_text("Q4_1")
    expect(row.locator("input[name=model_id]")).to_have_value("smollm2")
    expect(page.locator(".missing-folder")).to_contain_text("LMSTUDIO_MODELS_DIR")
    row.locator("input[name=model_id]").fill("smollm2-ollama")
    screenshot(page, shots, "09-import-from-ollama")

    row.locator("button[type=submit]").click()
    expect(page).to_have_url(re.compile(r"/admin/catalog/ggufimport/$"))
    job = page.locator("#result_list tbody tr", has_text="smollm2-ollama")
    expect(job).to_contain_text("Ollama: smollm2:latest")
    # The list refreshes itself every 2 s while an import runs.
    expect(job.locator(".field-status")).to_have_text("Done", timeout=180_000)
    expect(job.locator(".field-imported")).to_have_text("smollm2-ollama")
    screenshot(page, shots, "10-import-from-ollama-done")

    models = httpx.get(f"{server.api}/models", timeout=10).json()["data"]
    assert "smollm2-ollama" in [model["id"] for model in models]
    page.goto("/admin/catalog/catalogmodel/")
    page.locator("#result_list a", has_text="smollm2-ollama").click()
    expect(page.locator("#id_system_prompt")).to_have_value(SMOLLM_SYSTEM)
    expect(page.locator("#id_default_temperature")).to_have_value("0.2")
    screenshot(page, shots, "11-imported-model")
