"""What the admins of the background jobs (GGUF imports, hub pulls) share: who may start,
watch, cancel and resume them."""

from __future__ import annotations

from django.http import HttpRequest


class ImportPermissions:
    """Before admin.ModelAdmin in a job admin's bases: adding a job (and its actions) takes the
    catalog.import_models permission, and holding it also shows the list."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("catalog.import_models")

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return self.has_add_permission(request) or super().has_view_permission(request, obj)
