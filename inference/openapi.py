"""GET /openapi.json: the API description, generated from the pydantic protocol models."""

from __future__ import annotations

from functools import cache

from pydantic.json_schema import models_json_schema

from inference.protocol.anthropic.errors import AnthropicErrorResponse
from inference.protocol.anthropic.events import MessageStreamEvent
from inference.protocol.anthropic.requests import CountTokensRequest, MessagesRequest
from inference.protocol.anthropic.responses import MessageResponse, TokenCount
from inference.protocol.openai.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
)
from inference.protocol.openai.completions import Completion, CompletionRequest
from inference.protocol.openai.embeddings import EmbeddingList, EmbeddingRequest
from inference.protocol.openai.errors import ErrorResponse
from inference.protocol.openai.models import ModelCard, ModelList
from inference.protocol.openai.responses import (
    DeletedResponse,
    InputItemList,
    ResponseObject,
    ResponseRequest,
)
from inference.protocol.openai.responses_events import ResponseLifecycleEvent

REF = "#/components/schemas/{model}"


def _ref(model: type) -> dict:
    return {"$ref": REF.format(model=model.__name__)}


def _errors(*statuses: int) -> dict:
    content = {"application/json": {"schema": _ref(ErrorResponse)}}
    return {str(status): {"description": "Error", "content": content} for status in statuses}


def _generation(request: type, response: type, chunk: type, summary: str) -> dict:
    return {
        "post": {
            "summary": summary,
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref(request)}},
            },
            "responses": {
                "200": {
                    "description": "The completion, or with stream: true server-sent events of "
                    "chunks ending in data: [DONE]",
                    "content": {
                        "application/json": {"schema": _ref(response)},
                        "text/event-stream": {"schema": _ref(chunk)},
                    },
                },
                **_errors(400, 404, 405, 413, 500, 503),
            },
        }
    }


def _json(description: str, model: type) -> dict:
    return {"description": description, "content": {"application/json": {"schema": _ref(model)}}}


def _model_paths() -> dict:
    model_param = {"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}
    return {
        "/v1/models": {
            "get": {
                "summary": "Enabled catalog models",
                "responses": {"200": _json("The models", ModelList)},
            }
        },
        "/v1/models/{model}": {
            "get": {
                "summary": "One catalog model",
                "parameters": [model_param],
                "responses": {"200": _json("The model", ModelCard), **_errors(404)},
            }
        },
    }


def _responses_paths() -> dict:
    """The Responses API: create (JSON, or typed events with stream: true), and the stored
    responses of the calling key."""
    id_param = {"name": "response_id", "in": "path", "required": True, "schema": {"type": "string"}}
    query = [
        {
            "name": "limit",
            "in": "query",
            "schema": {"type": "integer", "minimum": 1, "maximum": 100},
        },
        {"name": "order", "in": "query", "schema": {"type": "string", "enum": ["asc", "desc"]}},
        {"name": "after", "in": "query", "schema": {"type": "string"}},
    ]
    create = _generation(
        ResponseRequest, ResponseObject, ResponseLifecycleEvent, "Create a response"
    )
    create["post"]["responses"]["200"]["description"] = (
        "The response, or with stream: true typed server-sent events (event: <type>), "
        "ending with response.completed, response.incomplete or response.failed"
    )
    stored = {"200": _json("The stored response", ResponseObject), **_errors(404)}
    deleted = {"200": _json("Deleted", DeletedResponse), **_errors(404)}
    listed = {"200": _json("The response's input items", InputItemList), **_errors(400, 404)}
    return {
        "/v1/responses": create,
        "/v1/responses/{response_id}": {
            "get": {"summary": "A stored response", "parameters": [id_param], "responses": stored},
            "delete": {
                "summary": "Delete a stored response",
                "parameters": [id_param],
                "responses": deleted,
            },
        },
        "/v1/responses/{response_id}/input_items": {
            "get": {
                "summary": "A stored response's input items",
                "parameters": [id_param, *query],
                "responses": listed,
            }
        },
    }


def _messages_paths() -> dict:
    """Anthropic's Messages API: its errors are {"type": "error", "error": {...}}."""
    content = {"application/json": {"schema": _ref(AnthropicErrorResponse)}}
    errors = {
        str(status): {"description": "Error", "content": content}
        for status in (400, 401, 404, 405, 413, 429, 500, 503)
    }
    create = _generation(MessagesRequest, MessageResponse, MessageStreamEvent, "Create a message")
    create["post"]["responses"].update(errors)
    create["post"]["responses"]["200"]["description"] = (
        "The message, or with stream: true server-sent events (event: <type>) from "
        "message_start to message_stop"
    )
    count = {
        "post": {
            "summary": "Count a message's input tokens",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref(CountTokensRequest)}},
            },
            "responses": {"200": _json("The prompt's token count", TokenCount), **errors},
        }
    }
    return {"/v1/messages": create, "/v1/messages/count_tokens": count}


def _embeddings_paths() -> dict:
    create = {
        "post": {
            "summary": "Embed text or token ids (an embedding model; see capabilities)",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref(EmbeddingRequest)}},
            },
            "responses": {
                "200": _json("One vector per input", EmbeddingList),
                **_errors(400, 404, 405, 413, 429, 500, 503),
            },
        }
    }
    return {"/v1/embeddings": create}


@cache
def openapi_document() -> dict:
    models = [
        ChatCompletionRequest,
        ChatCompletion,
        ChatCompletionChunk,
        CompletionRequest,
        Completion,
        EmbeddingRequest,
        EmbeddingList,
        ModelList,
        ModelCard,
        ErrorResponse,
        ResponseRequest,
        ResponseObject,
        ResponseLifecycleEvent,
        DeletedResponse,
        InputItemList,
        MessagesRequest,
        MessageResponse,
        MessageStreamEvent,
        CountTokensRequest,
        TokenCount,
        AnthropicErrorResponse,
    ]
    _, schemas = models_json_schema(
        [(m, "validation" if m.__name__.endswith("Request") else "serialization") for m in models],
        ref_template=REF,
    )
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "mlx-django-server",
            "version": "1",
            "description": "OpenAI-compatible API",
        },
        "paths": {
            "/v1/chat/completions": _generation(
                ChatCompletionRequest, ChatCompletion, ChatCompletionChunk, "Chat completion"
            ),
            "/v1/completions": _generation(
                CompletionRequest, Completion, Completion, "Text completion (legacy)"
            ),
            **_embeddings_paths(),
            **_model_paths(),
            **_responses_paths(),
            **_messages_paths(),
        },
        "components": {"schemas": schemas["$defs"]},
    }
