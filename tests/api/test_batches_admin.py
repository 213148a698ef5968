"""The admin's batches (progress, owner, the cancel action) and files (owner, purpose, size,
expiry, a staff-only download), in process with Django's test client."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from batches import storage
from batches.models import Batch, StoredFile


@pytest.fixture
def stored(db, settings, tmp_path) -> StoredFile:
    settings.VAR_DIR = tmp_path
    row = StoredFile(filename="in.jsonl", purpose="batch", created_at=timezone.now())
    row.bytes = storage.write(row.id, [b'{"a": 1}\n'])
    row.save(force_insert=True)
    return row


def test_files_and_batches_in_the_admin(admin_client, client, stored):
    now = timezone.now()
    batch = Batch.objects.create(
        id="batch_admin",
        endpoint="/v1/chat/completions",
        status="in_progress",
        total=3,
        completed=1,
        created_at=now,
        expires_at=now + timedelta(hours=24),
    )
    files = admin_client.get(reverse("admin:batches_storedfile_changelist"))
    page = files.content.decode()
    assert files.status_code == 200 and "in.jsonl" in page and "9\xa0bytes" in page
    url = reverse("admin:batches_storedfile_download", args=[stored.pk])
    download = admin_client.get(url)
    assert download.status_code == 200 and b"".join(download.streaming_content) == b'{"a": 1}\n'
    assert client.get(url).status_code == 302  # to the login page: staff only
    listed = admin_client.get(reverse("admin:batches_batch_changelist"))
    assert listed.status_code == 200 and b"1 / 0 / 3" in listed.content
    admin_client.post(
        reverse("admin:batches_batch_changelist"),
        {"action": "cancel_batches", "_selected_action": [batch.pk]},
    )
    batch.refresh_from_db()
    assert batch.status == "cancelling" and batch.cancelling_at is not None


def test_expired_files_are_swept_content_and_row(stored):
    from batches.retention import sweep_expired

    kept = StoredFile(filename="kept", purpose="user_data", created_at=timezone.now())
    kept.expires_at = timezone.now() + timedelta(hours=1)
    kept.bytes = storage.write(kept.id, [b"x"])
    kept.save(force_insert=True)
    StoredFile.objects.filter(pk=stored.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert sweep_expired() == 1
    assert list(StoredFile.objects.values_list("pk", flat=True)) == [kept.pk]
    assert not storage.path_of(stored.pk).exists() and storage.path_of(kept.pk).exists()
