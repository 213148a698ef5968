"""What the browser tests import: the staff login, the tiny model's name, the wait for the
engine, screenshots, and the record of what the pages reported."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from playwright.sync_api import Page

# Debian's chromium by default; CHROMIUM names another build (e.g. on a Mac).
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
USERNAME, PASSWORD = "admin", "pw-for-tests"
MODEL = "tiny"
WAIT_MS = 30_000  # for the engine: loading a model, generating


def screenshot(page: Page, shots: Path, name: str) -> None:
    path = shots / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")


class Problems:
    """What the pages reported: uncaught errors, alert()s and console errors."""

    def __init__(self) -> None:
        self.page_errors: list[str] = []
        self.console_errors: list[str] = []

    def watch(self, page: Page) -> Page:
        page.on("pageerror", lambda error: self.page_errors.append(f"{page.url}: {error}"))
        page.on(
            "dialog", lambda dialog: self.page_errors.append(f"{page.url}: alert {dialog.message}")
        )
        page.on("console", self._console)
        return page

    def _console(self, message) -> None:
        location = message.location
        # The browser asks for /favicon.ico by itself; the pages have none (a harmless 404).
        if message.type == "error" and not location.get("url", "").endswith("/favicon.ico"):
            self.console_errors.append(
                f"{location.get('url')}:{location.get('lineNumber')}: {message.text}"
            )
