"""The catalog admin's forms in a real browser: an alias typed as plain text (no JSON) saves and
the API answers to it; a GGUF import that fails says why in plain words on its list, its log is
one click away, and Retry, once the file is whole, imports it."""

from __future__ import annotations

import re
import shutil

import httpx
from playwright.sync_api import expect

from tests.operations.browser.support import WAIT_MS, screenshot

ALIASED = "forms-tiny"  # its own model: the package's `tiny` is left as the other tests expect


def test_an_alias_typed_as_plain_text_saves_and_the_api_answers_to_it(
    page, server, shots, tiny_dir
):
    page.goto("/admin/catalog/catalogmodel/add/")
    page.fill("#id_public_id", ALIASED)
    page.select_option("#id_source", "local")
    page.fill("#id_location", str(tiny_dir))
    page.fill("#id_aliases", '["gpt-4o-mini"]')  # what the JSON box wanted: refused, and why
    page.click("input[name=_save]")
    expect(page.locator(".field-aliases .errorlist")).to_contain_text(
        "Write one value per line, without JSON brackets or quotes"
    )
    page.fill("#id_aliases", "gpt-4o-mini\nclaude-haiku-*")
    page.fill("#id_context_length", "99999999")
    page.click("input[name=_save]")
    expect(page.locator(".field-context_length .errorlist")).to_contain_text("At most 512 tokens")
    screenshot(page, shots, "40-catalog-context-refused")
    page.fill("#id_context_length", "")
    page.click("input[name=_save]")
    expect(page).to_have_url(re.compile(r"/admin/catalog/catalogmodel/$"))
    row = page.locator("#result_list tbody tr", has_text=ALIASED)
    expect(row.locator(".field-answers_to")).to_have_text("gpt-4o-mini, claude-haiku-*")
    screenshot(page, shots, "40-catalog-alias-saved")

    row.locator("a", has_text=ALIASED).click()
    expect(page.locator("#id_aliases")).to_have_value("gpt-4o-mini\nclaude-haiku-*")
    expect(page.locator("#id_context_length")).to_have_attribute(
        "placeholder", "512 (the model's own)"
    )
    help_text = page.locator(".field-aliases .help")
    expect(help_text).to_contain_text("One per line.")

    card = httpx.get(f"{server.api}/models/{ALIASED}", timeout=10).json()
    assert card["aliases"] == ["gpt-4o-mini", "claude-haiku-*"]
    reply = httpx.post(
        f"{server.api}/chat/completions",
        json={
            "model": "gpt-4o-mini",
            "max_tokens": 4,
            "messages": [{"role": "user", "content": "Hi"}],
        },
        timeout=WAIT_MS / 1000 * 4,
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["model"] == "gpt-4o-mini"  # replies name the id the client sent


def test_a_failed_import_says_why_and_retry_imports_it(page, server, shots, demo_gguf, tmp_path):
    gguf = tmp_path / "smol.gguf"
    gguf.write_bytes(demo_gguf.read_bytes()[:3_000_000])  # its header reads, its tensors do not
    page.goto("/admin/catalog/ggufimport/add/")
    page.fill("#id_model_id", "retried-smol")
    page.fill("#id_source_path", str(gguf))
    page.click("input[name=_save]")
    expect(page).to_have_url(re.compile(r"/admin/catalog/ggufimport/$"))
    job = page.locator("#result_list tbody tr", has_text="retried-smol")
    # The list refreshes itself every 2 s while the import runs.
    expect(job.locator(".field-status")).to_have_text("Failed", timeout=120_000)
    outcome = job.locator(".field-outcome_actions")
    expect(outcome).to_contain_text("the file is cut short")
    expect(outcome).not_to_contain_text("see the log")
    screenshot(page, shots, "40-import-failed")

    job.locator("a.job-log").click()
    assert "cannot import smol.gguf" in page.locator("body").inner_text()
    page.go_back()
    job.locator("a", has_text="retried-smol").click()
    expect(page.locator("#job-failure")).to_contain_text("the file is cut short")
    screenshot(page, shots, "40-import-failed-page")

    expect(page.locator("#job-failure button.retry")).to_be_visible()
    page.go_back()

    shutil.copyfile(demo_gguf, gguf)  # the file made whole, then Retry on the list
    job.locator("button.retry").click()
    expect(page).to_have_url(re.compile(r"/admin/catalog/ggufimport/$"))
    expect(page.locator(".messagelist")).to_contain_text(
        "Importing retried-smol in the background."
    )
    job = page.locator("#result_list tbody tr", has_text="retried-smol")
    expect(job.locator(".field-status")).to_have_text("Done", timeout=180_000)
    expect(job.locator(".field-imported")).to_have_text("retried-smol")
    expect(job.locator("button.retry")).to_have_count(0)
    screenshot(page, shots, "40-import-retried-done")
    models = httpx.get(f"{server.api}/models", timeout=10).json()["data"]
    assert "retried-smol" in [model["id"] for model in models]
