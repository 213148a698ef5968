from django.contrib import admin
from django.urls import include, path

from inference.views import health

urlpatterns = [
    path("admin/", admin.site.urls),
    path("v1/", include("inference.urls")),
    path("health", health),
]
