"""Anthropic's Messages dialect: {"type": "error", "error": {"type", "message"}} bodies (the
type named after the status), events framed with their `event:` line, and a broken stream
ending with `event: error` and that body, nothing after it."""

from __future__ import annotations

from inference.protocol.anthropic.errors import error_body
from inference.protocol.anthropic.requests import MessagesRequest
from inference.serving.anthropic.plan import plan_messages
from inference.serving.anthropic.writer import MessageWriter
from inference.serving.dialect import Dialect, Operation
from inference.serving.sse import named_event

DIALECT = Dialect(
    "anthropic",
    error_body,
    frame=named_event,
    operations={MessagesRequest: Operation(plan_messages, MessageWriter, "msg")},  # type: ignore[arg-type]
)
