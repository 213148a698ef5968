"""The HTTP client behind `manage.py warm|unload|pool`: it talks to the running server."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.core.management.base import CommandError, CommandParser

from catalog.aliases import named_by


def add_server_arguments(parser: CommandParser) -> None:
    parser.add_argument("--url", default=settings.SERVER_URL, help="the running server")
    parser.add_argument("--token", default=settings.ADMIN_TOKEN, help="the admin token")


def call(url: str, token: str, method: str, path: str, timeout: float = 600) -> dict:
    request = urllib.request.Request(
        url.rstrip("/") + path,
        method=method,
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        data=b"" if method == "POST" else None,
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        raise CommandError(_error_message(exc)) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CommandError(f"cannot reach the server at {url}: {reason}") from None


def _error_message(exc: urllib.error.HTTPError) -> str:
    """The server's own sentence, then its status: what an operator reads first is what went
    wrong, not a number."""
    try:
        message = json.load(exc)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = str(exc.reason)
    return f"{message} (HTTP {exc.code})"


def with_progress(label: str, work: Callable[[], dict], write: Callable[[str], None]) -> dict:
    """Runs `work` while showing the time it has taken so far. The line is ended when the work
    is, so that what follows (the result, or Django's "CommandError: ...") is a line of its
    own on a terminal and in a log alike (a log keeps every `\r`-redrawn line on one)."""
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["result"] = work()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    thread.start()
    shown = False
    while thread.is_alive():
        write(f"\r{label}… {time.monotonic() - started:5.1f}s")
        shown = True
        thread.join(0.2)
    if shown:
        write("\n")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def named(model: str, resolved: str) -> str:
    """How a result names its model: `alias (model id)` when the name was an alias."""
    return model if model == resolved else f"{model} ({resolved})"


@dataclass(frozen=True)
class Listed:
    """A catalog row of the pool document, as catalog/aliases.named_by reads one."""

    public_id: str
    aliases: list[str]


def catalog_id(catalog: list[dict], model: str, enabled_only: bool) -> str:
    """The catalog id `model` names in the pool document's catalog, by the API's own rules
    (catalog/aliases.named_by: the id, Ollama's `:latest` twin, an exact alias, a glob)."""
    rows = [
        Listed(row["id"], row.get("aliases") or [])
        for row in catalog
        if row["enabled"] or not enabled_only
    ]
    found = named_by(model, rows)
    if found is None:
        which = "enabled model" if enabled_only else "model"
        raise CommandError(f"The server's catalog has no {which} named '{model}' (by id or alias).")
    return found.public_id


def resolve(url: str, token: str, model: str, enabled_only: bool) -> str:
    """The id the running server's catalog has for `model`, so that the command names it by
    its id in the URL (an alias with `/`, `hf.co/owner/repo:Q4_K_M`, cannot be a segment of one:
    Django decodes %2F before it routes)."""
    return catalog_id(call(url, token, "GET", "/control/pool")["catalog"], model, enabled_only)


def quote(model_id: str) -> str:
    return urllib.parse.quote(model_id, safe="")


def mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:,.1f} MiB"
