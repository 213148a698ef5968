from __future__ import annotations

import pytest

from inference.engine.types import JobRequest
from inference.serving import generation as generation_module


@pytest.fixture
def prepared(monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests go to the scripted engine as they are: there is no model whose tokenizer would
    prepare them (serving/prepare.py has tests of its own)."""

    async def as_they_are(requests: list[JobRequest]) -> list[JobRequest]:
        return requests

    monkeypatch.setattr(generation_module, "prepare_requests", as_they_are)
