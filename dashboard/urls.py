from django.urls import path

from dashboard import conversations, views

urlpatterns = [
    path("", views.index, name="dashboard"),
    path("playground", views.playground, name="playground"),
    path("dashboard/state", views.state),
    path("dashboard/series", views.series),
    path("dashboard/chat", views.playground_chat),
    path("dashboard/conversations", conversations.conversations),
    path("dashboard/conversations/<int:pk>", conversations.conversation),
]
