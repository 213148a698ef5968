"""`last_used` columns (catalog models, API keys): a hint for operators, written at most once
a minute, since a write per request would serialise SQLite's writers."""

from __future__ import annotations

from datetime import timedelta

from django.db import models
from django.utils import timezone

RESOLUTION = timedelta(minutes=1)


async def touch_last_used(row: models.Model) -> None:
    now = timezone.now()
    if row.last_used is None or now - row.last_used > RESOLUTION:
        await type(row).objects.filter(pk=row.pk).aupdate(last_used=now)
