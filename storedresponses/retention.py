"""How long stored responses are kept: purged by `manage.py purge_responses`, and cheaply on
the way (at most once an hour per process) when RESPONSES_RETENTION is set."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from storedresponses.models import StoredResponse

log = logging.getLogger(__name__)
AUTO_PURGE_EVERY = 3600.0  # seconds between automatic purges in one process
_last_auto_purge: float | None = None


def purge_older_than(seconds: float) -> int:
    """Deletes responses created more than `seconds` ago; returns how many."""
    cutoff = timezone.now() - timedelta(seconds=seconds)
    _, per_model = StoredResponse.objects.filter(created_at__lt=cutoff).delete()
    return per_model.get(StoredResponse._meta.label, 0)


def auto_purge_due(now: float | None = None) -> bool:
    """Whether this process should purge now; claims the turn when it says yes."""
    global _last_auto_purge
    if not settings.RESPONSES_RETENTION:
        return False
    now = time.monotonic() if now is None else now
    if _last_auto_purge is not None and now - _last_auto_purge < AUTO_PURGE_EVERY:
        return False
    _last_auto_purge = now
    return True


def auto_purge() -> None:
    """The retention applied on the way; never fails the request that triggered it."""
    if not auto_purge_due():
        return
    try:
        count = purge_older_than(settings.RESPONSES_RETENTION)
    except Exception:
        log.exception("purging stored responses failed")
        return
    if count:
        log.info("purged %d stored responses older than the retention", count)
