"""The door: an ASGI layer in front of Django that holds request bodies to MAX_REQUEST_BODY
before any of them is read.

Django's ASGI handler reads a whole body (spooled to a temporary file past
FILE_UPLOAD_MAX_MEMORY_SIZE) before any middleware or view runs, so a limit checked in a view
comes after the disk has taken whatever a client sent, key or no key. Here a declared
Content-Length over the cap is answered 413 unread, and a body without one (chunked) is cut
where it passes the cap: Django is told the client left, and the 413 goes out instead, with
`Connection: close` so that uvicorn stops reading the rest.

The larger allowances: the admin's GGUF upload (catalog's GGUF imports) may be
MAX_GGUF_UPLOAD from a signed-in staff session; an upload to POST /v1/files may be
MAX_FILE_BYTES (and its form's few fields) from a caller with a valid key (or anyone, where
keys are not required). Anyone else's body there is held to MAX_REQUEST_BODY like every
other."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from functools import cache
from http.cookies import CookieError, SimpleCookie
from importlib import import_module
from types import SimpleNamespace
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.urls import reverse

from apikeys.auth import authenticate, keys_required
from inference.edge.dialects import ANTHROPIC, OPENAI, Dialect
from inference.protocol.errors import APIError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class Cap:
    limit: int
    setting: str  # named in the 413, so an operator knows what to raise


class Door:
    """Wraps an ASGI app; HTTP requests pass once their body fits the cap, every other scope
    (lifespan, websocket) passes untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = content_length(scope)
        cap = await cap_for(scope, length)
        if length is not None and length > cap.limit:
            await refuse(scope, send, cap)
            return
        meter = Meter(receive, send, cap.limit)
        await self.app(scope, meter.receive, meter.send)
        if meter.cut and not meter.started:
            await refuse(scope, send, cap)


class Meter:
    """The app's receive and send, counting body bytes: the message that would pass the cap
    becomes a disconnect, so the app stops reading (Django drops the request unanswered) and
    nothing past the cap is buffered."""

    def __init__(self, receive: Receive, send: Send, limit: int) -> None:
        self._receive, self._send, self.limit = receive, send, limit
        self.read = 0
        self.cut = False
        self.started = False

    async def receive(self) -> Message:
        if self.cut:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] == "http.request":
            self.read += len(message.get("body", b""))
            if self.read > self.limit:
                self.cut = True
                return {"type": "http.disconnect"}
        return message

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)


def content_length(scope: Scope) -> int | None:
    """The declared body length; None when there is none (chunked) or it is not a number
    (uvicorn's parser refuses those before we see them)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


FILES_PATH = "/v1/files"
FORM_ALLOWANCE = 64 * 1024  # a file upload's multipart boundaries, headers and other fields


async def cap_for(scope: Scope, length: int | None) -> Cap:
    normal = Cap(settings.DATA_UPLOAD_MAX_MEMORY_SIZE, "MAX_REQUEST_BODY")
    if scope.get("method") != "POST" or scope["path"] not in (gguf_upload_path(), FILES_PATH):
        return normal
    if length is not None and length <= normal.limit:
        return normal  # small enough for anyone: no session or key lookup
    if scope["path"] == FILES_PATH:
        if await holds_key(scope):
            return Cap(settings.MAX_FILE_BYTES + FORM_ALLOWANCE, "MAX_FILE_BYTES")
        return normal
    if await sync_to_async(is_staff_session)(cookie(scope, settings.SESSION_COOKIE_NAME)):
        return Cap(settings.MAX_GGUF_UPLOAD, "MAX_GGUF_UPLOAD")
    return normal


@cache
def gguf_upload_path() -> str:
    return reverse("admin:catalog_ggufimport_add")


async def holds_key(scope: Scope) -> bool:
    """Whether the bearer key is valid, or none is needed: what the view's auth would pass."""
    if not await keys_required():
        return True
    for header, value in scope.get("headers", ()):
        if header == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return await authenticate(token.strip()) is not None
    return False


def cookie(scope: Scope, name: str) -> str | None:
    for header, value in scope.get("headers", ()):
        if header != b"cookie":
            continue
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(value.decode("latin-1"))
        except CookieError:
            continue
        if name in jar:
            return jar[name].value
    return None


def is_staff_session(session_key: str | None) -> bool:
    """Whether the session is a signed-in, active staff user's who may import models, checked
    as the admin checks it (django.contrib.auth.get_user: the session's user, and its password
    hash unchanged); anyone else's body would only be refused after it was read."""
    if not session_key:
        return False
    from django.contrib.auth import get_user

    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user = get_user(SimpleNamespace(session=store))  # type: ignore[arg-type]
    return bool(user.is_active and user.is_staff and user.has_perm("catalog.import_models"))


def dialect_of(path: str) -> Dialect:
    """Which dialect the 413 is written in: the view behind the path is never reached."""
    return ANTHROPIC if path.startswith("/v1/messages") else OPENAI


async def refuse(scope: Scope, send: Send, cap: Cap) -> None:
    error = APIError(
        f"The request body is too large: this server takes at most {cap.limit} bytes "
        f"({cap.setting}).",
        status=413,
        code="request_too_large",
    )
    body = dialect_of(scope["path"]).error_body(error).model_dump_json().encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),  # the rest of the body is never read
    ]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})
