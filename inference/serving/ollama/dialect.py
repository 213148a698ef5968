"""Ollama's dialect: {"error": "message"} bodies, each stream object one JSON line (NDJSON, no
`data:`), nothing after the last; a broken stream ends with one more line, its error body (the
Python client raises it as a ResponseError)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from pydantic import BaseModel

from inference.protocol.errors import APIError
from inference.protocol.ollama.errors import error_body
from inference.protocol.ollama.requests import ChatRequest, GenerateRequest
from inference.serving.dialect import Dialect, Operation
from inference.serving.ollama.plan import plan_ollama_chat, plan_ollama_generate
from inference.serving.ollama.writer import OllamaChatWriter, OllamaGenerateWriter
from inference.serving.sse import NDJSON, EventStream, ndjson_line

DIALECT = Dialect(
    "ollama",
    error_body,
    frame=ndjson_line,
    media_type=NDJSON,
    operations={
        ChatRequest: Operation(plan_ollama_chat, OllamaChatWriter, "chatcmpl"),  # type: ignore[arg-type]
        GenerateRequest: Operation(plan_ollama_generate, OllamaGenerateWriter, "cmpl"),  # type: ignore[arg-type]
    },
)


def one_object(reply: BaseModel) -> EventStream:
    """A stream of one object: what Ollama streams for an answer that is whole at once (a
    model loaded, a pull of a model it has)."""
    return EventStream(_lines(ndjson_line(reply)), error_lines, NDJSON)


async def _lines(*lines: str) -> AsyncIterator[str]:
    for line in lines:
        yield line


def error_lines(error: APIError) -> list[str]:
    return [ndjson_line(error_body(error))]
