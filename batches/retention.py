"""Files past their `expires_at` (OpenAI's `expires_after`: anchor created_at plus seconds)
are deleted, content and row, by `sweep_expired`: the batch runner calls it on its own
thread every FILES_SWEEP_INTERVAL (inference/batches/runner.py), never inside a request."""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from batches import storage
from batches.models import StoredFile

log = logging.getLogger(__name__)
BATCH = 500  # rows deleted per transaction


def delete_files(ids: list[str]) -> int:
    """The rows first, in one transaction (a batch naming one keeps its id, SET_NULL), then
    the contents: a content without a row is never served."""
    with transaction.atomic():
        count, _ = StoredFile.objects.filter(pk__in=ids).delete()
    for file_id in ids:
        storage.remove(file_id)
    return count


def sweep_expired() -> int:
    """Deletes every file past its expiry; returns how many. Never raises."""
    total = 0
    try:
        expired = StoredFile.objects.filter(expires_at__lt=timezone.now()).order_by("expires_at")
        while ids := list(expired.values_list("pk", flat=True)[:BATCH]):
            total += delete_files(ids)
    except Exception:
        log.exception("sweeping expired files failed")
    if total:
        log.info("deleted %d expired files", total)
    return total
