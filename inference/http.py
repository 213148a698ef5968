from django.http import HttpResponse, StreamingHttpResponse
from pydantic import BaseModel

from inference.protocol.errors import APIError


def json_response(payload: BaseModel, status: int = 200) -> HttpResponse:
    return HttpResponse(payload.model_dump_json(), status=status, content_type="application/json")


def error_response(error: APIError) -> HttpResponse:
    return json_response(error.body(), status=error.status)


def sse_response(lines) -> StreamingHttpResponse:
    response = StreamingHttpResponse(lines, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass chunks through as they come
    return response
