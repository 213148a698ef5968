from django.contrib import admin
from django.urls import include, path

from inference.views import health, openapi

urlpatterns = [
    path("admin/", admin.site.urls),
    path("v1/", include("inference.urls")),
    path("health", health),
    path("openapi.json", openapi),
]
