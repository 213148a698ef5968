from django.urls import path

from dashboard import views

urlpatterns = [
    path("", views.index, name="dashboard"),
    path("playground", views.playground, name="playground"),
    path("dashboard/state", views.state),
    path("dashboard/series", views.series),
    path("dashboard/chat", views.playground_chat),
]
