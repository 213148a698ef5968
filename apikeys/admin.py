from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.cache import add_never_cache_headers

from apikeys.models import ApiKey


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("name", "masked", "active", "models", "max_concurrent_requests", "last_used")
    list_filter = ("active",)
    search_fields = ("name", "lookup")
    filter_horizontal = ("allowed_models",)
    readonly_fields = ("masked", "created", "last_used")
    fields = ("name", "active", "allowed_models", "max_concurrent_requests", *readonly_fields)
    actions = ("activate", "deactivate")

    @admin.display(description="key")
    def masked(self, key: ApiKey) -> str:
        return key.masked if key.lookup else "(made when saved)"

    @admin.display(description="allowed models")
    def models(self, key: ApiKey) -> str:
        return ", ".join(m.public_id for m in key.allowed_models.all()) or "all"

    def save_model(self, request: HttpRequest, key: ApiKey, form, change: bool) -> None:
        if not change:
            # Kept on the request only: rendered once by response_add, never stored.
            request._new_api_secret = key.new_secret()
        super().save_model(request, key, form, change)

    def response_add(self, request: HttpRequest, key: ApiKey, post_url_continue=None):
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "key": key,
            "secret": request._new_api_secret,
            "title": f"API key {key.name} created",
        }
        response: HttpResponse = TemplateResponse(request, "admin/apikeys/created.html", context)
        add_never_cache_headers(response)  # the secret must not stay in a browser cache
        return response

    @admin.action(description="Activate")
    def activate(self, request, queryset) -> None:
        queryset.update(active=True)

    @admin.action(description="Deactivate (requests with it get 401)")
    def deactivate(self, request, queryset) -> None:
        queryset.update(active=False)
