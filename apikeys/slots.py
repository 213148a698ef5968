"""Per-key concurrency shared by every server instance on one PostgreSQL (SHARED_LIMITS).

A running request holds one `ConcurrencySlot` row, a lease on its key's limit. Taking one locks
the key's row, so two instances never both see the last free slot; the lease is renewed while
the request runs and deleted when it ends. An instance that dies stops renewing, and its slots
expire within SHARED_LIMITS_LEASE_SECONDS: nothing leaks, whatever killed it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from datetime import timedelta

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection, transaction
from django.db.models import DateTimeField, ExpressionWrapper, Value
from django.db.models.functions import Now

from apikeys.auth import Caller
from apikeys.models import ApiKey, ConcurrencySlot

log = logging.getLogger(__name__)
Release = Callable[[], None]


def shared_limits() -> bool:
    """Shared only where instances can share: the setting on, and a PostgreSQL catalog."""
    return settings.SHARED_LIMITS and connection.vendor == "postgresql"


def _lease_end(lease: float) -> ExpressionWrapper:
    # The database's clock, so instances whose clocks disagree still agree on expiry.
    return ExpressionWrapper(Now() + Value(timedelta(seconds=lease)), output_field=DateTimeField())


def take_slot(
    key_id: int, limit: int, instance: str, request_id: str, lease: float, released: list[int]
) -> int | None:
    """One of the key's `limit` slots across every instance: the new slot's id, or None when
    they are all taken. `released`: this process's slots given back but not yet deleted."""
    with transaction.atomic():
        # A client's next request right after its last one ended must find that slot free.
        drop(released)
        # The key's row is the lock: acquirers of one key wait for each other, other keys don't.
        list(ApiKey.objects.select_for_update().filter(pk=key_id).values_list("pk"))
        slots = ConcurrencySlot.objects.filter(key_id=key_id)
        slots.filter(expires_at__lte=Now()).delete()  # dead instances' leases
        if slots.count() >= limit:
            return None
        slot = ConcurrencySlot.objects.create(
            key_id=key_id, instance=instance, request_id=request_id, expires_at=_lease_end(lease)
        )
        return slot.pk


def renew(slot_ids: list[int], lease: float) -> int:
    """Pushes these slots' expiry one lease ahead, in one UPDATE; returns how many were left."""
    if not slot_ids:
        return 0
    return ConcurrencySlot.objects.filter(pk__in=slot_ids).update(expires_at=_lease_end(lease))


def drop(slot_ids: list[int]) -> None:
    ConcurrencySlot.objects.filter(pk__in=slot_ids).delete()


class SharedLimiter:
    """This process's slots in the shared table. One thread ("slot-leases") renews them all
    every third of a lease and deletes released ones: a release comes from whatever thread
    closes the request (the event loop included), and must neither block it nor touch the ORM
    there."""

    def __init__(self) -> None:
        self._held: dict[int, str] = {}  # slot id -> request id, renewed until released
        self._released: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    async def acquire(self, caller: Caller, request_id: str) -> Release | None:
        """A slot for this request, released by calling what it returns; None when the key is
        at its limit on all instances together."""
        if caller.key_id is None or caller.max_concurrent is None:
            return lambda: None
        self._start()
        slot_id = await sync_to_async(take_slot)(
            caller.key_id,
            caller.max_concurrent,
            settings.INSTANCE_NAME,
            request_id,
            settings.SHARED_LIMITS_LEASE_SECONDS,
            self._next_released(0),
        )
        if slot_id is None:
            return None
        with self._lock:
            self._held[slot_id] = request_id
        return lambda: self._release(slot_id)

    def _release(self, slot_id: int) -> None:
        with self._lock:
            if self._held.pop(slot_id, None) is None:
                return  # released already
        self._released.put(slot_id)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="slot-leases", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        renew_at = time.monotonic()
        while True:
            lease = settings.SHARED_LIMITS_LEASE_SECONDS
            released = self._next_released(max(0.0, renew_at - time.monotonic()))
            try:
                if released:
                    drop(released)
                if time.monotonic() >= renew_at:  # due even while releases keep coming
                    renew_at = time.monotonic() + lease / 3
                    self._renew(lease)
            except Exception:  # the database away: its leases expire, requests go on
                log.exception("renewing or releasing shared concurrency slots")
                connection.close()  # this thread's connection; the next turn opens a new one

    def _next_released(self, wait: float) -> list[int]:
        """Slots released within `wait` seconds (0: already); a burst of them is one DELETE."""
        try:
            released = [self._released.get(timeout=wait) if wait else self._released.get_nowait()]
        except queue.Empty:
            return []
        while not self._released.empty():
            released.append(self._released.get_nowait())
        return released

    def _renew(self, lease: float) -> None:
        with self._lock:
            held = list(self._held)
        renewed = renew(held, lease)
        if renewed < len(held):
            log.warning("%d slot lease(s) had expired before renewal", len(held) - renewed)


shared_limiter = SharedLimiter()
