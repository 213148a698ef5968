"""Request bodies: JSON parsed and validated into the endpoint's pydantic model."""

from __future__ import annotations

import json
import logging
import re

import numpy as np
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import HttpRequest
from django.http.multipartparser import MultiPartParserError
from pydantic import BaseModel, ValidationError

from inference.protocol.errors import APIError

log = logging.getLogger(__name__)


def parse_body(request: HttpRequest, schema: type[BaseModel]) -> BaseModel:
    if getattr(schema, "multipart", False):
        return validated(schema, parse_form(request))
    try:
        raw = request.body
    except RequestDataTooBig:
        raise APIError("The request body is too large.", status=413) from None
    data = parse_json(raw)
    if not isinstance(data, dict):
        raise APIError("The request body must be a JSON object.")
    return validated(schema, data)


def validated(schema: type[BaseModel], data: dict) -> BaseModel:
    try:
        parsed = schema.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None
    if parsed.model_extra:
        log.warning("ignoring unknown fields: %s", ", ".join(sorted(parsed.model_extra)))
    return parsed


def parse_form(request: HttpRequest) -> dict:
    """A multipart/form-data body (for models that say `multipart`, as POST /v1/files): its
    fields, `name[key]` nested as the SDKs write objects (`expires_after[seconds]`), and its
    files as Django's uploaded files (past FILE_UPLOAD_MAX_MEMORY_SIZE on disk, never read
    whole into memory)."""
    if request.content_type != "multipart/form-data":
        raise APIError("This endpoint takes a multipart/form-data body.")
    try:
        fields, files = request.POST, request.FILES
    except RequestDataTooBig:
        raise APIError("The request body's form fields are too large.", status=413) from None
    except (MultiPartParserError, TooManyFieldsSent, TooManyFilesSent) as exc:
        raise APIError(f"We could not parse the multipart body of your request: {exc}") from None
    data: dict = {}
    for name, value in fields.items():
        outer, _, inner = name.partition("[")
        if inner.endswith("]") and outer:
            nested = data.setdefault(outer, {})
            if isinstance(nested, dict):
                nested[inner[:-1]] = value
        else:
            data[name] = value
    for name in files:
        data[name] = files[name]
    return data


ASKED_MODEL_CHARS = 200  # of a model name kept for the record: what a table cell can show
# The most of a body read for the model it names when its caller was refused (no key, a bad
# one): a flood of strangers must not cost a parse of MAX_REQUEST_BODY each.
STRANGER_BODY_BYTES = 64 * 1024


def asked_model(request: HttpRequest, whole: bool) -> str:
    """The "model" a JSON body names, for the record of a request refused before its body was
    parsed into its model, or by that parsing (an invalid field; `whole`), or its caller by
    auth (not `whole`: only a body that says it is at most STRANGER_BODY_BYTES); "" where the
    body is not read, not JSON or names none."""
    length = request.headers.get("Content-Length", "")
    if not whole and not (length.isdigit() and int(length) <= STRANGER_BODY_BYTES):
        return ""
    try:
        data = parse_json(request.body)
    except (APIError, RequestDataTooBig):
        return ""
    model = data.get("model") if isinstance(data, dict) else None
    return model[:ASKED_MODEL_CHARS] if isinstance(model, str) else ""


def parse_json(raw: bytes) -> object:
    """The body's JSON value; anything that is not JSON, or nests deeper than MAX_DEPTH, is
    the client's 400 (the parser's own RecursionError included), never a 500."""
    try:
        text = raw.decode(json.detect_encoding(raw), "surrogatepass")
        too_deep = nesting_over(text.encode("utf-8", "surrogatepass"), MAX_DEPTH)
        if not too_deep:
            return json.loads(text)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise APIError("We could not parse the JSON body of your request.") from None
    raise APIError(f"The JSON body of your request nests deeper than {MAX_DEPTH} levels.")


# Deeper than any request needs (tool schemas nest a few dozen levels at most), and far enough
# below the interpreter's recursion limit for what walks the value later: validation, the
# chat template's tojson, grammar compiling, the request record.
MAX_DEPTH = 128
# Brackets of either kind as "[" and "]"; every other byte deleted.
_FOLD = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))


def nesting_over(raw: bytes, limit: int) -> bool:
    """Whether UTF-8 JSON text nests arrays and objects deeper than `limit`, read without
    recursion: strings set aside (escapes first, so each quote left opens or closes one), the
    brackets kept, and their running depth summed by numpy (a 4 MiB body in milliseconds)."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False  # the usual case: too few brackets to nest that deep
    unescaped = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    outside = b"".join(unescaped.split(b'"')[::2])
    brackets = np.frombuffer(outside.translate(_FOLD, _NOT_BRACKETS), dtype=np.uint8)
    steps = np.where(brackets == ord("["), np.int32(1), np.int32(-1))
    return bool(steps.size) and int(np.cumsum(steps, dtype=np.int32).max()) > limit


# Labels pydantic puts in an error's location for union members and validators, not fields.
_NOT_FIELDS = re.compile(r"[\[\]-]|^(str|int|float|bool|list|dict|none)$")


def validation_error(exc: ValidationError) -> APIError:
    first = exc.errors(include_url=False)[0]
    if first["type"] == "invalid_param":  # a validator that knows which param is wrong
        return APIError(first["msg"], param=first["ctx"]["param"])
    parts: list[str] = []
    for part in first["loc"]:
        if isinstance(part, str) and _NOT_FIELDS.search(part):
            break
        parts.append(str(part))
    param = ".".join(parts) or None
    message = first["msg"]
    return APIError(f"Invalid value for '{param}': {message}" if param else message, param=param)
