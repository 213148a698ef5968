from asgiref.sync import async_to_sync
from django.contrib import admin, messages

from catalog.models import CatalogModel, ModelFamily
from inference.protocol.errors import APIError
from inference.serving.control import unload_model, warm_model


@admin.register(ModelFamily)
class ModelFamilyAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "adapter", "priority", "extra_stop_tokens")
    list_editable = ("priority",)
    search_fields = ("name", "slug")
    prepopulated_fields = {"slug": ("name",)}


@admin.register(CatalogModel)
class CatalogModelAdmin(admin.ModelAdmin):
    list_display = (
        "public_id",
        "display_name",
        "source",
        "family",
        "enabled",
        "preload",
        "updated",
    )
    list_filter = ("enabled", "source", "family")
    search_fields = ("public_id", "display_name", "location")
    readonly_fields = ("created", "updated")
    actions = ("warm", "unload")
    fieldsets = (
        (None, {"fields": ("public_id", "display_name", "enabled", "preload", "pinned")}),
        (
            "Weights",
            {"fields": ("source", "location", "family", "compute_format", "context_length")},
        ),
        (
            "Generation defaults",
            {
                "fields": (
                    "default_max_tokens",
                    "default_temperature",
                    "default_top_p",
                    "system_prompt",
                )
            },
        ),
        ("History", {"fields": ("created", "updated")}),
    )

    @admin.action(description="Warm (load into the running server)")
    def warm(self, request, queryset) -> None:
        for entry in queryset:
            try:
                result = async_to_sync(warm_model)(entry.public_id)
            except APIError as exc:
                self.message_user(request, f"{entry}: {exc.message}", messages.ERROR)
                continue
            seconds = result["load_seconds"]
            note = "already loaded" if result["already_loaded"] else f"loaded in {seconds:.1f}s"
            self.message_user(request, f"{entry}: {note}", messages.SUCCESS)

    @admin.action(description="Unload (free its memory)")
    def unload(self, request, queryset) -> None:
        for entry in queryset:
            result = async_to_sync(unload_model)(entry.public_id)
            note = "unloaded" if result["unloaded"] else "was not loaded"
            self.message_user(request, f"{entry}: {note}", messages.SUCCESS)
