import logging
from collections.abc import AsyncIterator

from django.http import HttpResponse, StreamingHttpResponse
from pydantic import BaseModel

from inference.protocol.errors import APIError, server_error
from inference.serving.sse import DONE, sse_event

log = logging.getLogger(__name__)


def json_response(payload: BaseModel, status: int = 200) -> HttpResponse:
    return HttpResponse(payload.model_dump_json(), status=status, content_type="application/json")


def error_response(error: APIError) -> HttpResponse:
    response = json_response(error.body(), status=error.status)
    for name, value in error.headers.items():
        response[name] = value
    return response


async def _guarded(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """A bug met mid-stream still ends the stream the OpenAI way: an error event, then [DONE]."""
    try:
        async for line in lines:
            yield line
    except Exception:
        log.exception("stream failed")
        yield sse_event(server_error().body())
        yield DONE


def sse_response(lines: AsyncIterator[str]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(_guarded(lines), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass chunks through as they come
    return response
