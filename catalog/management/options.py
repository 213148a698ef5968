"""What the catalog's management commands share."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from catalog.models import ModelFamily


def family_by_slug(slug: str | None) -> ModelFamily | None:
    if slug is None:
        return None
    family = ModelFamily.objects.filter(slug=slug).first()
    if family is None:
        known = ", ".join(ModelFamily.objects.values_list("slug", flat=True))
        raise CommandError(f"unknown family {slug!r} (known: {known})")
    return family


def error_messages(error: ValidationError) -> str:
    return "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in error.message_dict.items())


def _interrupt(signum: int, frame) -> None:
    raise KeyboardInterrupt(f"stopped by signal {signum}")


@contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """A stopped command (kill, a service manager's stop, the admin's cancel) unwinds like
    Ctrl-C: an import removes its staging folder, a pull keeps its partial files, and the
    admin's row says what happened."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers (call_command from a thread)
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
