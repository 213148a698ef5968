"""A batch's input file checked before any line runs, as OpenAI checks it: each line one JSON
object `{"custom_id", "method": "POST", "url", "body"}`, custom_ids unique, the url the batch's
endpoint, a `model` in each body. What is wrong is reported per line in OpenAI's words (the
batch's `errors`: code, message, param, line); a body's other fields are checked when its line
runs, by the endpoint's own request model, and a bad one goes to the error file."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from batches import storage

MAX_REPORTED = 100  # errors listed on a failed batch: enough to fix a file by


@dataclass
class Checked:
    lines: list[tuple[str, dict]] = field(default_factory=list)  # (custom_id, body) in order
    errors: list[dict] = field(default_factory=list)


def _error(code: str, message: str, line: int | None, param: str | None = None) -> dict:
    return {"code": code, "message": message, "param": param, "line": line}


def check_line(raw: bytes, number: int, endpoint: str) -> tuple[str, dict] | dict:
    """The line's (custom_id, body), or its error."""
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return _error("invalid_json_line", "This line is not parseable as valid JSON.", number)
    for name in ("custom_id", "method", "url", "body"):
        if name not in data:
            return _error(
                "missing_required_parameter",
                f"Missing required parameter: '{name}'.",
                number,
                name,
            )
    custom_id, body = data["custom_id"], data["body"]
    # NUL: PostgreSQL's text refuses it.
    if not isinstance(custom_id, str) or not 0 < len(custom_id) <= 512 or "\x00" in custom_id:
        message = "The custom_id must be a string of 1 to 512 characters (no NUL)."
        return _error("invalid_custom_id", message, number, "custom_id")
    if data["method"] != "POST":
        message = "The HTTP method for this request is not supported. Only POST is supported."
        return _error("invalid_method", message, number, "method")
    if data["url"] != endpoint:
        message = (
            f"The URL provided for this request ('{data['url']}') does not match the batch's "
            f"endpoint ('{endpoint}')."
        )
        return _error("mismatched_endpoint", message, number, "url")
    if not isinstance(body, dict):
        return _error("invalid_body", "The body must be a JSON object.", number, "body")
    if not isinstance(body.get("model"), str) or not body["model"]:
        message = "Missing required parameter: 'body.model'."
        return _error("missing_required_parameter", message, number, "body.model")
    return custom_id, body


def check_input(file_id: str, endpoint: str, max_lines: int) -> Checked:
    checked = Checked()
    seen: set[str] = set()
    for number, raw in enumerate(storage.read_lines(file_id), 1):
        if not raw.strip():
            continue
        found = check_line(raw, number, endpoint)
        if isinstance(found, dict):
            checked.errors.append(found)
        elif found[0] in seen:
            message = (
                "The custom_id for this request is a duplicate of another request. The "
                "custom_id parameter must be unique for each request in a batch."
            )
            checked.errors.append(_error("duplicate_custom_id", message, number, "custom_id"))
        else:
            seen.add(found[0])
            checked.lines.append(found)
        if len(checked.errors) >= MAX_REPORTED:
            break
    if not checked.errors and not checked.lines:
        checked.errors.append(_error("empty_file", "The batch input file is empty.", None))
    elif len(checked.lines) > max_lines:
        message = (
            f"The batch input file has {len(checked.lines)} requests; a batch takes at most "
            f"{max_lines} (BATCH_MAX_LINES)."
        )
        checked.errors.append(_error("too_many_requests", message, None))
    return checked
