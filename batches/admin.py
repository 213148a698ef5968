"""Files and batches in the admin: batches with their progress, status and owner, and a cancel
action (the runner ends them `cancelled`); files with owner, purpose, size and expiry, and a
download link for staff."""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.views.decorators import staff_member_required
from django.db.models import QuerySet
from django.http import FileResponse, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.defaultfilters import filesizeformat
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html

from batches import storage
from batches.models import Batch, StoredFile
from batches.retention import delete_files


@admin.register(Batch)
class BatchAdmin(admin.ModelAdmin):
    list_display = ("id", "created_at", "dialect", "endpoint", "status", "api_key", "progress")
    list_filter = ("status", "dialect", "endpoint", "api_key")
    search_fields = ("id",)
    list_select_related = ("api_key",)
    actions = ["cancel_batches"]
    readonly_fields = [f.name for f in Batch._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # made by POST /v1/batches and /v1/messages/batches only

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    @admin.display(description="done / failed / total")
    def progress(self, row: Batch) -> str:
        return f"{row.completed} / {row.failed} / {row.total}"

    @admin.action(description="Cancel the selected batches")
    def cancel_batches(self, request: HttpRequest, queryset: QuerySet[Batch]) -> None:
        moved = queryset.filter(status__in=Batch.ACTIVE).update(
            status=Batch.Status.CANCELLING, cancelling_at=timezone.now()
        )
        # The server's runner reads each batch's status as it runs: it ends them cancelled.
        self.message_user(request, f"{moved} batch(es) cancelling.", messages.SUCCESS)


@admin.register(StoredFile)
class StoredFileAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "filename",
        "purpose",
        "api_key",
        "size",
        "created_at",
        "expires_at",
        "download",
    )
    list_filter = ("purpose", "api_key")
    search_fields = ("id", "filename")
    list_select_related = ("api_key",)
    readonly_fields = [f.name for f in StoredFile._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # uploaded through POST /v1/files, or written by a batch

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def delete_model(self, request: HttpRequest, obj: StoredFile) -> None:
        delete_files([obj.pk])  # its content too

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[StoredFile]) -> None:
        delete_files(list(queryset.values_list("pk", flat=True)))

    @admin.display(description="size", ordering="bytes")
    def size(self, row: StoredFile) -> str:
        return filesizeformat(row.bytes)

    @admin.display(description="content")
    def download(self, row: StoredFile) -> str:
        url = reverse("admin:batches_storedfile_download", args=[row.pk])
        return format_html('<a href="{}">download</a>', url)

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "<str:file_id>/download/",
                self.admin_site.admin_view(staff_member_required(self.download_view)),
                name="batches_storedfile_download",
            )
        ]
        return own + super().get_urls()

    def download_view(self, request: HttpRequest, file_id: str) -> HttpResponse:
        if not self.has_view_permission(request):
            return HttpResponse(status=403)
        row = get_object_or_404(StoredFile, pk=file_id)
        return FileResponse(
            storage.path_of(row.id).open("rb"), as_attachment=True, filename=row.filename
        )
