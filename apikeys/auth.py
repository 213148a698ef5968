"""Who is calling /v1: the bearer key checked against the stored hashes."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from django.conf import settings

from apikeys.models import LOOKUP_LENGTH, ApiKey
from catalog.last_used import touch_last_used


@dataclass(frozen=True)
class Caller:
    """What serving needs to know about an authenticated key (never the secret)."""

    key_id: int | None
    name: str
    allowed_models: frozenset[str] | None  # None: every enabled model
    max_concurrent: int | None
    # The admin token or a staff session: what only an operator may do (a pull from the hub).
    operator: bool = False

    def may_use(self, model_id: str) -> bool:
        return self.allowed_models is None or model_id in self.allowed_models


ANONYMOUS = Caller(key_id=None, name="anonymous", allowed_models=None, max_concurrent=None)


def anonymous() -> Caller:
    """A caller without a key, where keys are not required: every anonymous caller together
    is held to a default key's concurrency (API_KEY_MAX_CONCURRENT), so that an open server
    cannot be made to run without bound. Read per request: the setting may change."""
    return Caller(None, "anonymous", None, settings.API_KEY_MAX_CONCURRENT or None)


async def keys_required() -> bool:
    return settings.REQUIRE_API_KEY or await ApiKey.objects.aexists()


async def authenticate(secret: str) -> Caller | None:
    key = await (
        ApiKey.objects.filter(lookup=secret[:LOOKUP_LENGTH], active=True)
        .prefetch_related("allowed_models")
        .afirst()
    )
    if key is None or not key.matches(secret):
        return None
    await touch_last_used(key)
    allowed = frozenset(m.public_id for m in key.allowed_models.all()) or None
    limit = key.max_concurrent_requests or settings.API_KEY_MAX_CONCURRENT or None
    return Caller(key.pk, key.name, allowed, limit)


class ConcurrencyLimiter:
    """Requests running per key, in this process (each server instance counts its own).
    Anonymous callers (key_id None) are counted together under None."""

    def __init__(self) -> None:
        self._running: dict[int | None, int] = {}
        self._lock = threading.Lock()

    def try_acquire(self, caller: Caller) -> bool:
        if caller.max_concurrent is None:  # the operator, or a key without a limit
            return True
        with self._lock:
            running = self._running.get(caller.key_id, 0)
            if running >= caller.max_concurrent:
                return False
            self._running[caller.key_id] = running + 1
            return True

    def release(self, caller: Caller) -> None:
        if caller.max_concurrent is None:
            return
        with self._lock:
            left = self._running.get(caller.key_id, 0) - 1
            if left > 0:
                self._running[caller.key_id] = left
            else:
                self._running.pop(caller.key_id, None)

    def forget(self, key_id: int | None) -> None:
        """Counts nothing running for this key (None: the anonymous callers); tests only."""
        with self._lock:
            self._running.pop(key_id, None)


limiter = ConcurrencyLimiter()
