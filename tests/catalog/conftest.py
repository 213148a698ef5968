"""What the catalog's admin tests share."""

from __future__ import annotations

import pytest

from catalog import background


@pytest.fixture
def started(monkeypatch, settings, tmp_path) -> list[list[str]]:
    """The command lines the admin starts; run in-process by the test (a subprocess could not
    see the test database)."""
    settings.MODEL_STORAGE_DIR = tmp_path / "models"
    settings.VAR_DIR = settings.MEDIA_ROOT = tmp_path
    commands: list[list[str]] = []
    monkeypatch.setattr(
        background.subprocess, "Popen", lambda command, **kwargs: commands.append(command)
    )
    return commands
