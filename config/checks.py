"""The start-up check (`manage.py check`, and every command that runs checks, `serve` among
them) that says when files only this server's user should read are open to others."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.checks import CheckMessage, Tags, Warning, register

# Group and others: any of their read, write or execute bits.
OTHERS = 0o077


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
