"""Request bodies: JSON parsed and validated into the endpoint's pydantic model."""

from __future__ import annotations

import json
import logging
import re

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest
from pydantic import BaseModel, ValidationError

from inference.protocol.errors import APIError

log = logging.getLogger(__name__)


def parse_body(request: HttpRequest, schema: type[BaseModel]) -> BaseModel:
    try:
        raw = request.body
    except RequestDataTooBig:
        raise APIError("The request body is too large.", status=413) from None
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise APIError("We could not parse the JSON body of your request.") from None
    if not isinstance(data, dict):
        raise APIError("The request body must be a JSON object.")
    try:
        parsed = schema.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None
    if parsed.model_extra:
        log.warning("ignoring unknown fields: %s", ", ".join(sorted(parsed.model_extra)))
    return parsed


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
