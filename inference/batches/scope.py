"""What the Files and Batch endpoints share: a caller's own rows, cursors, epoch times, and the
batch owner as a caller again (for the runner, which has no request)."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db.models import Model, Q, QuerySet

from apikeys.auth import Caller, anonymous
from apikeys.models import ApiKey


def owned(queryset: QuerySet, caller: Caller) -> QuerySet:
    """Only the caller's rows: another key's are missing, never forbidden."""
    return queryset.filter(api_key_id=caller.key_id)


def epoch(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp())


def rfc3339(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")


async def page(
    queryset: QuerySet, after: str, limit: int, newest_first: bool = True
) -> tuple[list[Model], bool]:
    """A page of rows by (created_at, id), after the row whose id is `after` (unknown: from
    the start, as OpenAI's cursor); the rows and whether more follow."""
    order = ("-created_at", "-id") if newest_first else ("created_at", "id")
    queryset = queryset.order_by(*order)
    if after:
        anchor = await queryset.filter(pk=after).values_list("created_at", flat=True).afirst()
        if anchor is not None:
            if newest_first:
                later = Q(created_at__lt=anchor) | Q(created_at=anchor, id__lt=after)
            else:
                later = Q(created_at__gt=anchor) | Q(created_at=anchor, id__gt=after)
            queryset = queryset.filter(later)
    rows = [row async for row in queryset[: limit + 1]]
    return rows[:limit], len(rows) > limit


def caller_of(key: ApiKey | None) -> Caller:
    """The caller a batch's requests run as: its key's model list and concurrency limit, as
    apikeys.auth.authenticate makes them for a request (or the anonymous caller)."""
    if key is None:
        return anonymous()
    allowed = frozenset(m.public_id for m in key.allowed_models.all()) or None
    limit = key.max_concurrent_requests or settings.API_KEY_MAX_CONCURRENT or None
    return Caller(key.pk, key.name, allowed, limit)
