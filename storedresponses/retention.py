"""How long stored responses are kept: purged by `manage.py purge_responses`, and by the
server's own timer (`manage.py serve` starts it: `start_purge_timer`), never inside a request.

Rows go in batches, each batch one transaction, so a purge of a large backlog never holds a
long lock, and one that stops midway leaves whole responses behind, never half of one."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from storedresponses.models import StoredResponse

log = logging.getLogger(__name__)
BATCH = 1000  # rows deleted per transaction


def purge_older_than(seconds: float, batch: int = BATCH) -> int:
    """Deletes responses created more than `seconds` ago, `batch` rows per transaction;
    returns how many."""
    cutoff = timezone.now() - timedelta(seconds=seconds)
    expired = StoredResponse.objects.filter(created_at__lt=cutoff).order_by("created_at")
    total = 0
    while True:
        ids = list(expired.values_list("pk", flat=True)[:batch])
        if not ids:
            return total
        total += delete_batch(ids)


def delete_batch(ids: list[str]) -> int:
    """Deletes these responses in one transaction without reading their JSON: the responses
    that followed them lose their previous_response_id (the model's SET_NULL), written out
    here so that Django's collector finds nothing left to load."""
    with transaction.atomic():
        StoredResponse.objects.filter(previous_response_id__in=ids).update(previous_response=None)
        _, per_model = StoredResponse.objects.filter(pk__in=ids).only("pk").delete()
    return per_model.get(StoredResponse._meta.label, 0)


def purge_expired() -> int:
    """One round of the timer: what RESPONSES_RETENTION says is expired; never raises."""
    if not settings.RESPONSES_RETENTION:
        return 0
    try:
        count = purge_older_than(settings.RESPONSES_RETENTION)
    except Exception:
        log.exception("purging stored responses failed")
        return 0
    if count:
        log.info("purged %d stored responses older than the retention", count)
    return count


class PurgeTimer(threading.Thread):
    """Purges once at start, then every `every` seconds, until stopped."""

    def __init__(self, every: float) -> None:
        super().__init__(name="purge-responses", daemon=True)
        self.every = every
        self.rounds = 0
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.is_set():
            close_old_connections()
            try:
                purge_expired()
            finally:
                # This thread's connection: not held open through the interval.
                connection.close()
            self.rounds += 1
            self._stopped.wait(self.every)

    def stop(self) -> None:
        self._stopped.set()
        self.join()


_timer: PurgeTimer | None = None
_timer_lock = threading.Lock()


def start_purge_timer(every: float | None = None) -> PurgeTimer | None:
    """This process's purge timer, started on the first call; None when responses are kept
    forever (RESPONSES_RETENTION=0) or the server is not to purge on its own
    (RESPONSES_PURGE_INTERVAL=0: `manage.py purge_responses` from cron instead)."""
    global _timer
    every = settings.RESPONSES_PURGE_INTERVAL if every is None else every
    with _timer_lock:
        if _timer is None and settings.RESPONSES_RETENTION and every:
            _timer = PurgeTimer(every)
            _timer.start()
        return _timer


def stop_purge_timer() -> None:
    global _timer
    with _timer_lock:
        timer, _timer = _timer, None
    if timer is not None:
        timer.stop()
