"""The dashboard's last hour in a real browser: real chat requests to the tiny model, then its
charts drawn from the server's samples, and a refused request listed with the model it asked
for. On a page of its own, so that the shared one stays where adding the tiny model left it, and
with the model unloaded again at the end, as test_pages.py expects to find both."""

from __future__ import annotations

import re

import httpx
from playwright.sync_api import BrowserContext, Page, expect

from tests.operations.browser.support import WAIT_MS, screenshot

CHAT = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}


def chat(server, model: str) -> httpx.Response:
    return httpx.post(f"{server.api}/chat/completions", json={**CHAT, "model": model}, timeout=120)


def points(page: Page, chart: str, label: str) -> int:
    """The points the chart drew for one label (data-points of its paths and dots)."""
    lines = page.locator(f'#chart-{chart} svg [data-label="{label}"]')
    return sum(int(lines.nth(i).get_attribute("data-points")) for i in range(lines.count()))


def test_dashboard_charts_follow_real_traffic(
    context: BrowserContext, problems, tiny_model, server, shots
):
    for _ in range(3):
        assert chat(server, tiny_model).status_code == 200
    assert chat(server, "no-such-model").status_code == 404
    page = problems.watch(context.new_page())  # the context's login
    try:
        look_at_the_dashboard(page, tiny_model, shots)
    finally:
        page.close()


def look_at_the_dashboard(page: Page, tiny_model: str, shots) -> None:
    page.goto("/")
    generated = page.locator("#chart-generated_tokens_per_second")
    # The engine's rate of its last 10 s, sampled every 5 s: the next sample sees the traffic.
    expect(generated.locator('svg [data-label="tiny"]').first).to_be_visible(timeout=WAIT_MS)
    assert points(page, "generated_tokens_per_second", "tiny") >= 1
    expect(generated.locator(".legend")).to_contain_text(re.compile(r"tiny: \d+(\.\d)? tok/s"))
    expect(generated.locator("svg text.time")).to_have_count(4)
    expect(generated.locator("svg text.time").first).to_have_text(re.compile(r"\d{2}:\d{2}"))
    ttft = page.locator("#chart-time_to_first_token")
    expect(ttft.locator(".legend")).to_contain_text(re.compile(r"tiny p50: \d+\.\d+ s"))
    assert points(page, "time_to_first_token", "tiny p95") >= 1
    memory = page.locator("#chart-memory .legend")
    expect(memory).to_contain_text(re.compile(r"weights: \d+ MiB"))
    expect(memory).to_contain_text(re.compile(r"process RSS: \d+(\.\d)? (MiB|GiB)"))
    # The tiny model has no drafter: that chart says so instead of drawing zeros.
    expect(page.locator("#chart-draft_acceptance .chart-empty")).to_have_text(
        "No drafts verified yet"
    )

    asked = page.locator("#recent-requests td.asked", has_text="no-such-model")
    expect(asked).to_have_count(1)
    expect(asked).to_have_attribute("title", "asked for; no model served it")
    backend = page.locator("#backend")
    expect(backend).to_contain_text("BLAS")
    # Its text wraps inside the card: nothing runs past the card's edge.
    overflow = page.evaluate(
        "() => { const card = document.getElementById('backend').parentElement;"
        " return card.scrollWidth - card.clientWidth; }"
    )
    assert overflow <= 0
    screenshot(page, shots, "30-dashboard-charts")

    row = page.locator(f'#catalog tr[data-model="{tiny_model}"]')
    row.locator("button.unload").click()
    expect(row.locator(".status")).to_have_text("not loaded", timeout=WAIT_MS)
