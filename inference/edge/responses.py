"""What views hand back, turned into Django responses; streams carry close callbacks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing

from django.conf import settings
from django.http import HttpResponse, StreamingHttpResponse
from pydantic import BaseModel

from inference.protocol.errors import server_error
from inference.serving.sse import SSE, EventStream

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


async def guarded(lines: AsyncIterator[str], stream: EventStream) -> AsyncIterator[str]:
    """Closing this closes the view's own generator at once, not whenever it is
    garbage-collected. Serving's stream loop ends every stream itself, whatever breaks it; a
    failure that still gets here (a bug past that loop) ends it the stream's own way, through
    its `end`, which knows what the dialect needs (Responses: the next sequence_number)."""
    async with aclosing(lines):  # type: ignore[type-var]
        try:
            async for line in lines:
                yield line
        except Exception:
            log.exception("stream failed")
            for line in stream.end(server_error()):
                yield line


# An SSE comment: every client's parser skips it, and proxies see bytes on the connection.
KEEPALIVE = ": keep-alive\n\n"


async def with_keepalive(lines: AsyncIterator[str], interval: float) -> AsyncIterator[str]:
    """The stream's lines, and a comment whenever none came for `interval` seconds (a request
    queued or reading a long prompt), so proxies with read timeouts keep the connection."""
    if interval <= 0:
        async with aclosing(lines):  # type: ignore[type-var]
            async for line in lines:
                yield line
        return
    pending: asyncio.Future | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(lines))
            done, _ = await asyncio.wait({pending}, timeout=interval)
            if not done:
                yield KEEPALIVE
                continue
            finished, pending = pending, None
            try:
                line = finished.result()
            except StopAsyncIteration:
                return
            yield line
    finally:
        if pending is not None:  # the client left while a line was awaited
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        await lines.aclose()  # type: ignore[attr-defined]


def event_stream_response(stream: EventStream) -> ClosingStreamingResponse:
    # NDJSON has no comment line: its clients read every line as a JSON object.
    interval = settings.SSE_KEEPALIVE_SECONDS if stream.media_type == SSE else 0
    response = ClosingStreamingResponse(
        guarded(with_keepalive(stream.lines, interval), stream), content_type=stream.media_type
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass chunks through as they come
    return response
