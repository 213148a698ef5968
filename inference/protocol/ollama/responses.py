"""Ollama's answers: /api/chat and /api/generate objects (each line of their NDJSON stream, the
last with done: true and the timings, in nanoseconds), /api/embed, /api/embeddings, /api/tags,
/api/show, /api/ps, /api/version and /api/pull's status and progress.

Ollama's server is written in Go and leaves out a field it has no value for; these models do the
same (None is left out, `OllamaModel`), so a stream's pieces carry no final-only fields."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, model_serializer


class OllamaModel(BaseModel):
    @model_serializer(mode="wrap")
    def _without_none(self, handler: Any) -> dict[str, Any]:
        return {key: value for key, value in handler(self).items() if value is not None}


class Timings(OllamaModel):
    """What the last object of a reply says about its cost (durations in nanoseconds)."""

    total_duration: int | None = None
    load_duration: int | None = None
    prompt_eval_count: int | None = None
    prompt_eval_duration: int | None = None
    eval_count: int | None = None
    eval_duration: int | None = None


class ToolCallFunction(OllamaModel):
    index: int | None = None
    name: str
    arguments: dict[str, Any]  # an object, not the JSON text OpenAI sends


class ToolCall(OllamaModel):
    id: str | None = None
    function: ToolCallFunction


class AssistantMessage(OllamaModel):
    role: str = "assistant"
    content: str = ""
    thinking: str | None = None
    tool_calls: list[ToolCall] | None = None


class ChatResponse(Timings):
    model: str
    created_at: str
    message: AssistantMessage
    done: bool
    done_reason: str | None = None


class GenerateResponse(Timings):
    model: str
    created_at: str
    response: str = ""
    thinking: str | None = None
    done: bool
    done_reason: str | None = None


class EmbedResponse(OllamaModel):
    model: str
    embeddings: list[list[float]]
    total_duration: int | None = None
    load_duration: int | None = None
    prompt_eval_count: int | None = None


class EmbeddingsResponse(OllamaModel):
    embedding: list[float]


class ModelDetails(OllamaModel):
    parent_model: str = ""
    format: str
    family: str
    families: list[str] | None = None
    parameter_size: str
    quantization_level: str


class ListedModel(OllamaModel):
    name: str
    model: str
    modified_at: str
    size: int
    digest: str
    details: ModelDetails


class ListResponse(OllamaModel):
    models: list[ListedModel]


class ShowResponse(OllamaModel):
    modelfile: str
    parameters: str = ""
    template: str = ""
    details: ModelDetails
    model_info: dict[str, Any] = Field(default_factory=dict)
    capabilities: list[str]
    modified_at: str


class RunningModel(OllamaModel):
    name: str
    model: str
    size: int
    digest: str
    details: ModelDetails
    expires_at: str
    size_vram: int
    context_length: int | None = None


class ProcessResponse(OllamaModel):
    models: list[RunningModel]


class VersionResponse(OllamaModel):
    version: str


class StatusResponse(OllamaModel):
    status: str


class ProgressResponse(StatusResponse):
    """A line of /api/pull's stream: a status, and while a file downloads its digest and
    bytes (what the client's progress bar reads)."""

    digest: str | None = None
    total: int | None = None
    completed: int | None = None
