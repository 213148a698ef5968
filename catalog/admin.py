from django.contrib import admin

from catalog.models import CatalogModel, ModelFamily


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
    fieldsets = (
        (None, {"fields": ("public_id", "display_name", "enabled", "preload")}),
        ("Weights", {"fields": ("source", "location", "family", "context_length")}),
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
