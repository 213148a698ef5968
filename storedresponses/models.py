"""Responses kept for retrieval and for `previous_response_id` chains (OpenAI Responses API).

A response belongs to the API key that created it: another key never sees it. Responses made
without a key (when keys are not required) share one anonymous scope (api_key is NULL). Deleting
a key deletes its responses: setting them to NULL would hand them to anonymous callers."""

from __future__ import annotations

from django.db import models

from apikeys.models import ApiKey


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
    # The request's parameters, as retrieval echoes them.
    instructions = models.TextField(null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    temperature = models.FloatField(null=True, blank=True)
    top_p = models.FloatField(null=True, blank=True)
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True)
    tools = models.JSONField(default=list, blank=True)
    tool_choice = models.JSONField(default=auto_tool_choice)
    parallel_tool_calls = models.BooleanField(default=True)
    text = models.JSONField(default=dict, blank=True)  # {"format": {...}}
    reasoning = models.JSONField(null=True, blank=True)
    user = models.CharField(max_length=256, null=True, blank=True)
    # What went in (each item with its own id) and what came out, as the wire has them.
    input_items = models.JSONField(default=list, blank=True)
    output = models.JSONField(default=list, blank=True)
    usage = models.JSONField(null=True, blank=True)
    incomplete_details = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "stored response"

    def __str__(self) -> str:
        return self.id
