from django.urls import path, re_path

from inference import batches_views, files_views, messages_views, responses_views, views

urlpatterns = [
    path("chat/completions", views.chat_completions),
    path("completions", views.completions),
    path("embeddings", views.embeddings),
    path("rerank", views.rerank),
    path("tokenize", views.tokenize),
    path("detokenize", views.detokenize),
    path("apply-template", views.apply_template),
    path("models", views.list_models),
    path("models/<str:model_id>", views.retrieve_model),
    path("messages", messages_views.messages),
    path("messages/count_tokens", messages_views.count_tokens),
    path("messages/batches", batches_views.message_batches),
    path("messages/batches/<str:batch_id>", batches_views.message_batch_detail),
    path("messages/batches/<str:batch_id>/cancel", batches_views.message_batch_cancel),
    path("messages/batches/<str:batch_id>/results", batches_views.message_batch_results),
    path("responses", responses_views.create_response),
    path("responses/<str:response_id>", responses_views.response_detail),
    path("responses/<str:response_id>/input_items", responses_views.response_input_items),
    path("files", files_views.files_collection),
    path("files/<str:file_id>", files_views.file_detail),
    path("files/<str:file_id>/content", files_views.file_content),
    path("batches", batches_views.batches_collection),
    path("batches/<str:batch_id>", batches_views.batch_detail),
    path("batches/<str:batch_id>/cancel", batches_views.batch_cancel),
    re_path(r"^(?P<path>.*)$", views.not_found),
]
