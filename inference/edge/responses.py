"""What views hand back, turned into Django responses; streams carry close callbacks."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import aclosing

from django.http import HttpResponse, StreamingHttpResponse
from pydantic import BaseModel

from inference.serving.sse import EventStream

log = logging.getLogger(__name__)

# What a view may return: a wire model (200, JSON), a plain dict (JSON), a stream of server-sent
# events, or a response it made itself.
ViewResult = BaseModel | dict | EventStream | HttpResponse


class ClosingStreamingResponse(StreamingHttpResponse):
    """Runs its close callbacks once when Django closes it: after the stream finished or failed,
    or when the client went away (Django's ASGI handler closes every response it sent)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._on_close: list[Callable[[], None]] = []

    def on_close(self, callback: Callable[[], None]) -> None:
        self._on_close.append(callback)

    def close(self) -> None:
        try:
            super().close()
        finally:
            callbacks, self._on_close = self._on_close, []
            for callback in callbacks:
                callback()


def json_response(payload: BaseModel, status: int = 200) -> HttpResponse:
    return HttpResponse(payload.model_dump_json(), status=status, content_type="application/json")


async def guarded(
    lines: AsyncIterator[str], failure: Callable[[], Iterable[str]]
) -> AsyncIterator[str]:
    """A bug met mid-stream still ends the stream in the dialect's way; closing this closes
    the view's own generator at once, not whenever it is garbage-collected."""
    async with aclosing(lines):  # type: ignore[type-var]
        try:
            async for line in lines:
                yield line
        except Exception:
            log.exception("stream failed")
            for line in failure():
                yield line


def event_stream_response(
    stream: EventStream, failure: Callable[[], Iterable[str]]
) -> ClosingStreamingResponse:
    response = ClosingStreamingResponse(
        guarded(stream.lines, failure), content_type="text/event-stream"
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass chunks through as they come
    return response
