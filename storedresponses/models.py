"""Responses kept for retrieval and for `previous_response_id` chains (OpenAI Responses API).

A response belongs to the API key that created it: another key never sees it. Responses made
without a key (when keys are not required) share one anonymous scope (api_key is NULL). Deleting
a key deletes its responses: setting them to NULL would hand them to anonymous callers."""

from __future__ import annotations

from typing import Any

from django.db import models

from apikeys.models import ApiKey
from storedresponses.fields import JSONText


def auto_tool_choice() -> str:
    return "auto"


class StoredResponse(models.Model):
    class Status(models.TextChoices):
        COMPLETED = "completed"
        INCOMPLETE = "incomplete"
        FAILED = "failed"

    id = models.CharField(primary_key=True, max_length=64, editable=False)
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.CASCADE, related_name="responses"
    )
    model = models.CharField(max_length=200, db_index=True)
    status = models.CharField(max_length=16, choices=Status.choices)
    created_at = models.DateTimeField(db_index=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    previous_response = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="followups"
    )
    # The request's parameters, as retrieval echoes them. Client text is kept as JSON text
    # (fields.py): PostgreSQL refuses NUL characters in text and \u0000 in jsonb.
    instructions = JSONText(null=True, blank=True)
    metadata = JSONText(default=dict, blank=True)
    temperature = models.FloatField(null=True, blank=True)
    top_p = models.FloatField(null=True, blank=True)
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True)
    tools = JSONText(default=list, blank=True)
    tool_choice = JSONText(default=auto_tool_choice)
    parallel_tool_calls = models.BooleanField(default=True)
    text = JSONText(default=dict, blank=True)  # {"format": {...}}
    reasoning = JSONText(null=True, blank=True)
    user = JSONText(null=True, blank=True)
    # What went in (each item with its own id) and what came out, as the wire has them.
    input_items = JSONText(default=list, blank=True)
    output = JSONText(default=list, blank=True)
    usage = JSONText(null=True, blank=True)
    incomplete_details = JSONText(null=True, blank=True)
    error = JSONText(null=True, blank=True)
    # The length of the stored JSON text (sizes.py): every JSON column for the key's quota,
    # the input and output items for a previous_response_id chain, summed before loading it.
    stored_bytes = models.PositiveBigIntegerField(default=0, editable=False)
    items_bytes = models.PositiveBigIntegerField(default=0, editable=False)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "stored response"

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.measure()
        super().save(*args, **kwargs)

    def measure(self) -> dict[str, int]:
        """Sets stored_bytes (every JSON column) and items_bytes (the input and output items)
        to the length of the text written for them (ASCII: characters are bytes); returns each
        column's."""
        sizes = {
            field.name: len(field.get_prep_value(getattr(self, field.name)) or "")
            for field in self._meta.concrete_fields
            if isinstance(field, JSONText)
        }
        self.stored_bytes = sum(sizes.values())
        self.items_bytes = sizes["input_items"] + sizes["output"]
        return sizes

    def __str__(self) -> str:
        return self.id
