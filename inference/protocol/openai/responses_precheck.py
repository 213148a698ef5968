"""What ResponseRequest checks before pydantic does, and how its errors are named: refusals
that pydantic would report badly (which union member failed) or not at all, the built-in
tools a client merely offers, and an error's param as OpenAI names it ("input.0.role")."""

from __future__ import annotations

import logging
import re
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticCustomError

from inference.protocol.errors import invalid_param
from inference.protocol.openai.responses_input import INPUT_ITEM_TYPES

log = logging.getLogger(__name__)

BUILT_IN_TOOLS = (
    "web_search",
    "web_search_preview",
    "file_search",
    "computer_use_preview",
    "computer",
    "code_interpreter",
    "image_generation",
    "mcp",
    "local_shell",
    "shell",
    "apply_patch",
    "custom",
)
# Fields OpenAI has that this server refuses rather than silently ignores.
REFUSED_FIELDS = {
    "conversation": "conversations are not supported: chain responses with previous_response_id.",
    "prompt": "reusable prompt templates are not supported: send input and instructions.",
}
UNSUPPORTED_PARTS = {"input_file", "input_audio"}
TEXT_PARTS = {"input_text", "output_text"}
TEXT_FORMATS = ("text", "json_object", "json_schema")


def precheck(data: dict) -> dict:
    """What pydantic would report badly (which union member failed) or not at all; the data
    without the built-in tools a client merely offers."""
    for field, message in REFUSED_FIELDS.items():
        if data.get(field) is not None:
            raise invalid_param(field, message)
    tools = data.get("tools")
    if isinstance(tools, list):
        for index, tool in enumerate(tools):
            if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
                raise invalid_param(f"tools.{index}.type", _tool_message(None))
        data = _without_built_in_tools(data, tools)
    text_format = data.get("text", {}).get("format") if isinstance(data.get("text"), dict) else None
    if isinstance(text_format, dict) and text_format.get("type") not in TEXT_FORMATS:
        raise invalid_param(
            "text.format.type", f"text.format.type must be one of {', '.join(TEXT_FORMATS)}."
        )
    choice = data.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") != "function":
        raise invalid_param("tool_choice", _tool_message(choice.get("type")))
    items = data.get("input")
    if isinstance(items, list):
        for index, item in enumerate(items):
            _precheck_item(item, f"input.{index}")
    return data


def _without_built_in_tools(data: dict, tools: list[dict]) -> dict:
    """Built-in tools (web search, image generation, freeform `custom` tools...) run on
    OpenAI's side: a client that merely offers one (Codex offers web_search) gets its turn
    without it; forcing one is refused (tool_choice)."""
    kept = [tool for tool in tools if tool["type"] in ("function", "namespace")]
    if len(kept) == len(tools):
        return data
    left_out = [tool["type"] for tool in tools if tool["type"] not in ("function", "namespace")]
    log.info("leaving out built-in tools: %s", ", ".join(left_out))
    return {**data, "tools": kept}


def _tool_message(kind: object) -> str:
    if kind in BUILT_IN_TOOLS:
        return (
            f"tool_choice forces the built-in tool '{kind}': this server runs no tools itself. "
            "Declare function tools ({type: 'function', name, parameters}) and force one."
        )
    if kind is None:
        return "Each tool needs a type: function (or namespace, a group of functions)."
    return "tool_choice can name only a function: {type: 'function', name}."


def _precheck_item(item: Any, where: str) -> None:
    if not isinstance(item, dict):
        raise invalid_param(where, "Each input item must be an object.")
    kind = item.get("type", "message")
    if kind not in INPUT_ITEM_TYPES:
        raise invalid_param(
            f"{where}.type",
            f"Input items of type {kind!r} are not supported; this server takes "
            f"{', '.join(INPUT_ITEM_TYPES)}.",
        )
    parts = item.get("content") if kind == "message" else item.get("output")
    if not isinstance(parts, list):
        return
    name = "content" if kind == "message" else "output"
    for index, part in enumerate(parts):
        part_type = part.get("type") if isinstance(part, dict) else None
        if not isinstance(part_type, str):
            continue  # left to the schema, which names the field (a list is not hashable)
        if part_type == "input_image" and name == "content":
            _precheck_image(part, f"{where}.{name}.{index}")
            continue
        if part_type in UNSUPPORTED_PARTS or part_type == "input_image":
            raise invalid_param(
                f"{where}.{name}.{index}",
                f"'{part_type}' content is not supported here: images go in a message's "
                "content (input_image), other files are not read."
                if part_type == "input_image"
                else f"'{part_type}' content is not supported: the models this server runs "
                "read text and images only.",
            )
        if part_type not in TEXT_PARTS:
            raise invalid_param(
                f"{where}.{name}.{index}.type",
                f"Unknown content part type {part_type!r}: use input_text (or output_text).",
            )


def _precheck_image(part: dict, where: str) -> None:
    if part.get("file_id") is not None:
        raise invalid_param(
            f"{where}.file_id",
            "Images by file_id are not supported: this server keeps no files. Send image_url "
            "as a data: URL (data:image/png;base64,...).",
        )


# Labels pydantic puts in a location for union members and tags, never field names.
_LABEL = re.compile(r"[\[\]=]|^(str|int|float|bool|list|dict|none|function-[a-z]+|[A-Z]\w*)$")


def named_error(exc: ValidationError) -> Exception:
    """The first error, as an invalid_param naming the field without union labels."""
    errors = exc.errors(include_url=False)
    first = next((e for e in errors if e["type"] == "invalid_param"), None)
    if first is not None:
        return invalid_param(first["ctx"]["param"], first["msg"])
    # In `str | list[...]` the string member's complaint hides the real one: skip it.
    first = next((e for e in errors if e["type"] != "string_type"), errors[0])
    parts = [str(p) for p in first["loc"] if not (isinstance(p, str) and _LABEL.search(p))]
    param = ".".join(parts)
    if not param:
        return PydanticCustomError("invalid_param", first["msg"], {"param": None})
    return invalid_param(param, f"Invalid value for '{param}': {first['msg']}")
