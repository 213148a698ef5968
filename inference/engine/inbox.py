"""What other threads put in the engine's inbox besides one request's jobs: commands."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from inference.engine.types import Event


@dataclass
class Command:
    """Work for the engine thread from elsewhere (warm, unload, status), answered by a future.
    `run` gets the engine."""

    run: Callable[[Any], Any]
    future: Future = field(default_factory=Future)


def ignore(event: Event) -> None:
    """The sink of a job nobody listens to: one that only renders its prompt, or a
    follower's copy of the leader's job."""
