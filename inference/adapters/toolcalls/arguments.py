"""Arguments written as JSON while a syntax whose values are not JSON is read (Qwen's XML
parameters, GLM's arg_key/arg_value, MiniMax's invoke, pythonic calls), typed by the
function's schema: a `days` parameter declared integer becomes `3`, not `"3"`.

A value declared a string streams as it arrives (escaped, its opening quote first); any other
value is held until it ends, then written typed. The pieces a writer returns, concatenated,
are exactly the arguments object."""

from __future__ import annotations

import json
from typing import Any

from inference.adapters.toolcalls.base import decode_json


def declared_types(schema: object) -> set[str]:
    """The JSON types a schema allows (its `type`, or its anyOf/oneOf branches'); empty when
    it says nothing."""
    if not isinstance(schema, dict):
        return set()
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return {k for k in kind if isinstance(k, str)}
    types: set[str] = set()
    for key in ("anyOf", "oneOf"):
        for branch in schema.get(key) or []:
            types |= declared_types(branch)
    if "enum" in schema and not types:
        types = {_json_type(v) for v in schema["enum"]}
    return types


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if value is None:
        return "null"
    return "string" if isinstance(value, str) else "object"


def is_string(schema: object) -> bool:
    """A value that is only ever a string: streamed as written."""
    return declared_types(schema) == {"string"}


def typed_value(raw: str, schema: object) -> Any:
    """`raw` as the schema types it: a declared string stays as written; anything else is
    read as JSON (Python's True/False/None too) when it parses, else kept as a string."""
    types = declared_types(schema)
    if types == {"string"}:
        return raw
    text = raw.strip()
    literal = {"True": "true", "False": "false", "None": "null"}.get(text, text)
    value = decode_json(literal)
    if value is None and literal != "null":
        return raw if "string" in types or not types else text
    if types and _json_type(value) not in types and not _widens(value, types):
        return raw  # e.g. "007" for a string-or-object: keep what the model wrote
    return value


def _widens(value: object, types: set[str]) -> bool:
    return _json_type(value) == "integer" and "number" in types


class ArgumentsWriter:
    """One call's arguments object, written key by key.

    `strip_newline`: formats that put each value on lines of its own (`<parameter=k>\\nV\\n`)
    drop one newline at each end of the value."""

    def __init__(self, schema: object, strip_newline: bool = False) -> None:
        properties = schema.get("properties") if isinstance(schema, dict) else None
        self._properties = properties if isinstance(properties, dict) else {}
        self._strip = strip_newline
        self._opened = False
        self._value_schema: object = None
        self._streaming = False
        self._raw = ""  # the value so far (held: a typed value, or a string's trailing newline)
        self._fresh = True  # nothing of the value read yet

    def key(self, name: str) -> str:
        """A value begins: the text up to it (`{` or `, `, then `"name": `)."""
        head = ", " if self._opened else "{"
        self._opened = True
        self._value_schema = self._properties.get(name)
        self._streaming = is_string(self._value_schema)
        self._raw, self._fresh = "", True
        return f"{head}{json.dumps(name, ensure_ascii=False)}: " + ('"' if self._streaming else "")

    def piece(self, text: str) -> str:
        """More of the current value; a string's text comes back escaped at once."""
        if self._fresh and text:
            self._fresh = False
            if self._strip and text.startswith("\n"):
                text = text[1:]
        self._raw += text
        if not self._streaming:
            return ""
        # A trailing newline may be the one the format puts before the closing tag.
        ready = self._raw.rstrip("\n") if self._strip else self._raw
        self._raw = self._raw[len(ready) :]
        return _escaped(ready)

    def end_value(self) -> str:
        raw, self._raw = self._raw, ""
        if self._strip and raw.endswith("\n"):
            raw = raw[:-1]
        if self._streaming:
            return _escaped(raw) + '"'
        return json.dumps(typed_value(raw, self._value_schema), ensure_ascii=False)

    def close(self) -> str:
        return "}" if self._opened else "{}"


def _escaped(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]
