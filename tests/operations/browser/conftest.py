"""What every browser test shares: one live server with a staff login for the whole package,
Debian's headless Chromium driven by Playwright, a logged-in page, the tiny model added through
the admin, and a check after each test that the pages reported no errors.

Screenshots land in $SCREENSHOT_DIR (var/screenshots by default). Chromium comes from
scripts/ensure_chromium.sh: Playwright never downloads a browser.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from tests.operations.browser.support import (
    CHROMIUM,
    MODEL,
    PASSWORD,
    USERNAME,
    Problems,
    screenshot,
)
from tests.support.helpers import ROOT
from tests.support.live_server import LiveServer, live_server


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    superuser = ("createsuperuser", "--noinput", "--username", USERNAME, "--email", "a@example.com")
    var = tmp_path_factory.mktemp("browser-var")
    with live_server(
        var,
        superuser,
        DJANGO_SUPERUSER_PASSWORD=PASSWORD,
        # Filled by the import test; the folders are read when the page is.
        OLLAMA_MODELS_DIR=str(var / "ollama"),
        LMSTUDIO_MODELS_DIR=str(var / "lmstudio"),
        # Keep-alive comments after 1 ms of quiet: the playground's streams carry some.
        SSE_KEEPALIVE_SECONDS="0.001",
    ) as server:
        yield server


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"{CHROMIUM} is missing: the browser tests drive Debian's Chromium "
            "(run `sh scripts/ensure_chromium.sh` as root, or `apt-get install chromium`)"
        )
    with sync_playwright() as playwright:
        # Root (CI containers) cannot use Chromium's sandbox.
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        yield browser
        browser.close()


@pytest.fixture(scope="package")
def shots() -> Path:
    directory = Path(os.environ.get("SCREENSHOT_DIR") or ROOT / "var/screenshots")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture(scope="package")
def problems() -> Problems:
    return Problems()


@pytest.fixture(autouse=True)
def no_page_errors(problems: Problems) -> Iterator[None]:
    yield
    errors = problems.page_errors + problems.console_errors
    problems.page_errors.clear()
    problems.console_errors.clear()
    assert not errors, "the pages reported errors:\n" + "\n".join(errors)


@pytest.fixture(scope="package")
def context(browser: Browser, server: LiveServer) -> Iterator[BrowserContext]:
    context = browser.new_context(base_url=server.url, viewport={"width": 1280, "height": 900})
    yield context
    context.close()


@pytest.fixture(scope="package")
def page(context: BrowserContext, problems: Problems, shots: Path) -> Page:
    """Logged in as staff through the admin login form."""
    page = problems.watch(context.new_page())
    page.goto("/admin/login/")
    page.fill("#id_username", USERNAME)
    page.fill("#id_password", PASSWORD)
    screenshot(page, shots, "01-admin-login")
    page.click("input[type=submit]")
    expect(page).to_have_url(re.compile(r"/admin/$"))
    return page


@pytest.fixture(scope="package")
def tiny_model(page: Page, server: LiveServer, shots: Path, tiny_dir: Path) -> str:
    """The tiny model, added to the catalog through the admin form."""
    page.goto("/admin/catalog/catalogmodel/add/")
    page.fill("#id_public_id", MODEL)
    page.select_option("#id_source", "local")
    page.fill("#id_location", str(tiny_dir))
    screenshot(page, shots, "02-admin-add-model")
    page.click("input[name=_save]")
    errors = page.locator(".errorlist, .errornote")
    assert not errors.count(), f"the admin refused the model: {errors.all_inner_texts()}"
    expect(page).to_have_url(re.compile(r"/admin/catalog/catalogmodel/$"))
    # Said here: whichever module's test asks for the model first sees the admin's answer.
    expect(page.locator(".messagelist .success")).to_contain_text(MODEL)
    screenshot(page, shots, "03-admin-catalog-list")
    return MODEL
