from django.urls import path, re_path

from inference import messages_views, views

urlpatterns = [
    path("chat/completions", views.chat_completions),
    path("completions", views.completions),
    path("models", views.list_models),
    path("models/<str:model_id>", views.retrieve_model),
    path("messages", messages_views.messages),
    path("messages/count_tokens", messages_views.count_tokens),
    re_path(r"^(?P<path>.*)$", views.not_found),
]
