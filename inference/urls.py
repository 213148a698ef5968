from django.urls import path, re_path

from inference import views

urlpatterns = [
    path("chat/completions", views.chat_completions),
    path("completions", views.completions),
    path("models", views.list_models),
    path("models/<str:model_id>", views.retrieve_model),
    re_path(r"^(?P<path>.*)$", views.not_found),
]
