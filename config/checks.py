"""The start-up check that says when files only this server's user should read are open to
others (files.W001).

Django runs every registered check in every command, and `make serve` runs four before the
server (migrate, import_gguf, add_model, then serve): the same warning came four times. It is
a warning about the server, so it is said where the server starts or is checked (`serve`,
`runserver`, `check`), once; the steps before say nothing of it. Outside manage.py (tests
calling call_command, a WSGI/ASGI server importing Django) the check always runs."""

from __future__ import annotations

import sys
from pathlib import Path

from django.conf import settings
from django.core.checks import CheckMessage, Tags, Warning, register

# Group and others: any of their read, write or execute bits.
OTHERS = 0o077
# The manage.py commands that say it.
SAID_BY = frozenset({"check", "serve", "runserver"})


def said_here(argv: list[str]) -> bool:
    """Whether this process should say it: anything but a manage.py command outside SAID_BY."""
    if not argv or Path(argv[0]).name != "manage.py":
        return True
    # As Django's ManagementUtility reads it: the command is the first argument.
    return len(argv) < 2 or argv[1] in SAID_BY


def private_files() -> list[tuple[Path, str]]:
    """What holds sessions, conversations and secrets, with what it holds."""
    found = [(Path(settings.VAR_DIR), "the server's data folder")]
    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3":
        name = str(database["NAME"])
        if name and name != ":memory:" and not name.startswith("file:"):
            found.append((Path(name), "the database (staff sessions, stored conversations)"))
    for secret in ("secret_key", "admin_token"):
        found.append((Path(settings.VAR_DIR) / secret, "a secret"))
    return found


@register(Tags.security, deploy=False)
def check_file_modes(app_configs: object = None, **kwargs: object) -> list[CheckMessage]:
    if not said_here(sys.argv):
        return []
    warnings: list[CheckMessage] = []
    for path, holds in private_files():
        try:
            mode = path.stat().st_mode & 0o777
        except FileNotFoundError:
            continue
        if mode & OTHERS:
            warnings.append(
                Warning(
                    f"{path}, {holds}, has mode {mode:o}: other users on this machine may read it.",
                    hint=f"chmod {'700' if path.is_dir() else '600'} {path}",
                    id="files.W001",
                )
            )
    return warnings
