"""What every response and stream chunk of one chat or completions request shares, and the
chunks built on it."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel

from inference.serving.ids import system_fingerprint
from inference.serving.sse import Trimmed, Wire
from inference.serving.writer import Run


def envelope(run: Run) -> dict:
    """id, created, model (as the client named it) and system_fingerprint."""
    return {
        "id": run.generation.id,
        "created": run.generation.created,
        "model": run.model,
        "system_fingerprint": system_fingerprint(),
    }


def chunk_writer(
    payload_type: type[BaseModel], run: Run, include_usage: bool
) -> Callable[..., Wire]:
    """Builds one stream's chunks: the same id, created and model on each."""
    shared = envelope(run)

    def chunk(choices: list, usage: BaseModel | None = None) -> Wire:
        payload = payload_type(**shared, choices=choices, usage=usage)
        # With include_usage every chunk says "usage": null but the last; without, no key.
        return payload if include_usage else Trimmed(payload, frozenset({"usage"}))

    return chunk
