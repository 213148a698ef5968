"""Which dialect an endpoint speaks, and its errors as HTTP responses. What a dialect is (its
error body, how its events are framed, how a broken stream ends, its plan builders and reply
writers) lives in serving, one `Dialect` per dialect package; the edge only picks one and
writes its error body as a response. Views only raise APIError."""

from __future__ import annotations

from django.http import HttpResponse

from inference.edge.responses import json_response
from inference.protocol.errors import APIError
from inference.serving.anthropic import DIALECT as ANTHROPIC
from inference.serving.dialect import Dialect
from inference.serving.ollama import DIALECT as OLLAMA
from inference.serving.openai import DIALECT as OPENAI
from inference.serving.responses import DIALECT as RESPONSES

__all__ = ["ANTHROPIC", "OLLAMA", "OPENAI", "RESPONSES", "Dialect", "error_response"]


def error_response(dialect: Dialect, error: APIError) -> HttpResponse:
    """The error in the dialect's body, with the status and headers the error names."""
    response = json_response(dialect.error_body(error), status=error.status)
    for name, value in error.headers.items():
        response[name] = value
    return response
