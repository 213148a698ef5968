"""Stored responses in the admin: a read-only list to look things up and delete them."""

from __future__ import annotations

import json

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.defaultfilters import filesizeformat
from django.utils.html import format_html

from storedresponses.models import StoredResponse

LARGE_COLUMNS = ("input_items", "output", "tools", "instructions", "text", "metadata", "error")


@admin.register(StoredResponse)
class StoredResponseAdmin(admin.ModelAdmin):
    list_display = ("id", "created_at", "model", "status", "api_key", "tokens", "size", "previous")
    list_filter = ("status", "model", "api_key")
    search_fields = ("id",)
    date_hierarchy = "created_at"
    list_select_related = ("api_key",)
    exclude = ("input_items", "output", "metadata", "tools", "text", "reasoning", "usage")
    readonly_fields = ("input_json", "output_json", "details_json")

    def get_queryset(self, request: HttpRequest) -> QuerySet[StoredResponse]:
        # A page lists up to 100 rows: their items, output and tools (megabytes each at
        # worst) are read only when one response is looked at.
        return super().get_queryset(request).defer(*LARGE_COLUMNS)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # made by POST /v1/responses only

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False  # what the model said is a record, never edited; viewing stays allowed

    @admin.display(description="tokens")
    def tokens(self, row: StoredResponse) -> str:
        usage = row.usage or {}
        return str(usage.get("total_tokens", "-"))

    @admin.display(description="stored size", ordering="stored_bytes")
    def size(self, row: StoredResponse) -> str:
        return filesizeformat(row.stored_bytes)

    @admin.display(description="previous response")
    def previous(self, row: StoredResponse) -> str:
        return row.previous_response_id or "-"

    def _pre(self, value: object):
        return format_html("<pre>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False))

    @admin.display(description="input items")
    def input_json(self, row: StoredResponse):
        return self._pre(row.input_items)

    @admin.display(description="output")
    def output_json(self, row: StoredResponse):
        return self._pre(row.output)

    @admin.display(description="parameters and usage")
    def details_json(self, row: StoredResponse):
        fields = ("metadata", "tools", "tool_choice", "text", "reasoning", "usage")
        return self._pre({name: getattr(row, name) for name in fields})
