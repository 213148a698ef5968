"""OpenAI's Files and Batch API, and Anthropic's Message Batches, kept in the database.

A file or a batch belongs to the API key that created it: another key never sees it. Those made
without a key (where keys are not required) share one anonymous scope (api_key is NULL).
Deleting a key deletes its files and batches, as it does its stored responses.

A batch's lines are rows (`BatchLine`), each written as its request ends, so that a server
that stops mid-batch resumes with only the lines not yet done; the output and error files are
written from those rows when the batch ends."""

from __future__ import annotations

import secrets

from django.db import models

from apikeys.models import ApiKey
from storedresponses.fields import JSONText


def file_id() -> str:
    return f"file-{secrets.token_hex(12)}"


def batch_id() -> str:
    return f"batch_{secrets.token_hex(12)}"


def message_batch_id() -> str:
    return f"msgbatch_{secrets.token_hex(12)}"


class StoredFile(models.Model):
    class Purpose(models.TextChoices):
        BATCH = "batch"
        BATCH_OUTPUT = "batch_output"
        USER_DATA = "user_data"
        FINE_TUNE = "fine-tune"
        ASSISTANTS = "assistants"
        VISION = "vision"
        EVALS = "evals"

    id = models.CharField(primary_key=True, max_length=64, default=file_id, editable=False)
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.CASCADE, related_name="files"
    )
    filename = models.CharField(max_length=512)
    purpose = models.CharField(max_length=32, choices=Purpose.choices, db_index=True)
    bytes = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(db_index=True)
    expires_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "file"

    def __str__(self) -> str:
        return f"{self.id} ({self.filename})"


class Batch(models.Model):
    class Status(models.TextChoices):
        VALIDATING = "validating"
        FAILED = "failed"
        IN_PROGRESS = "in_progress"
        FINALIZING = "finalizing"
        COMPLETED = "completed"
        EXPIRED = "expired"
        CANCELLING = "cancelling"
        CANCELLED = "cancelled"

    class Dialect(models.TextChoices):
        OPENAI = "openai"
        ANTHROPIC = "anthropic"

    id = models.CharField(primary_key=True, max_length=64, editable=False)
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.CASCADE, related_name="batches"
    )
    dialect = models.CharField(max_length=16, choices=Dialect.choices, default=Dialect.OPENAI)
    endpoint = models.CharField(max_length=64)
    input_file = models.ForeignKey(
        StoredFile, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The id as the client gave it: echoed even once the file is deleted.
    input_file_name = models.CharField(max_length=64, blank=True)
    completion_window = models.CharField(max_length=16, default="24h")
    metadata = JSONText(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, db_index=True)
    errors = JSONText(null=True, blank=True)  # validation errors: [{code, message, param, line}]
    output_file = models.ForeignKey(
        StoredFile, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    error_file = models.ForeignKey(
        StoredFile, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    total = models.PositiveIntegerField(default=0)
    completed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(db_index=True)
    expires_at = models.DateTimeField()
    in_progress_at = models.DateTimeField(null=True, blank=True)
    finalizing_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)
    cancelling_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    # Which server process runs it, until when: instances on one database never run one batch
    # together (a lease renewed while it runs, given back when it stops).
    runner = models.CharField(max_length=128, blank=True)
    leased_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "batches"

    ACTIVE = (Status.VALIDATING, Status.IN_PROGRESS, Status.FINALIZING, Status.CANCELLING)

    def __str__(self) -> str:
        return self.id


class BatchLine(models.Model):
    """One request of a batch: what it asks, and once done, what it answered."""

    class State(models.TextChoices):
        PENDING = "pending"
        SUCCEEDED = "succeeded"
        ERRORED = "errored"
        CANCELED = "canceled"
        EXPIRED = "expired"

    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="lines")
    index = models.PositiveIntegerField()  # its place in the input, from 0
    custom_id = models.CharField(max_length=512)
    body = JSONText()
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    # How many times it was started: a line the server stopped under runs again, once.
    attempts = models.PositiveIntegerField(default=0)
    request_id = models.CharField(max_length=64, blank=True)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    response = JSONText(null=True, blank=True)  # the endpoint's JSON body, answer or error
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["batch", "index"]
        constraints = [
            models.UniqueConstraint(fields=["batch", "index"], name="batch_line_index"),
            models.UniqueConstraint(fields=["batch", "custom_id"], name="batch_line_custom_id"),
        ]
        indexes = [models.Index(fields=["batch", "state"])]

    def __str__(self) -> str:
        return f"{self.batch_id}:{self.custom_id}"
