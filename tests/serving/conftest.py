from __future__ import annotations

import pytest

from inference.engine.types import JobRequest
from inference.serving import generation as generation_module
from inference.serving.prompts import PromptJob


@pytest.fixture
def prepared(monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests of token ids go to the scripted engine as they are: there is no model whose
    tokenizer would prepare them (tests/edge/test_prompt_limits.py tests serving/prepare.py)."""

    async def as_they_are(requests: list[PromptJob]) -> list[JobRequest]:
        return [JobRequest(r.spec, r.prompt, r.params, r.echo) for r in requests]

    monkeypatch.setattr(generation_module, "prepare_requests", as_they_are)
