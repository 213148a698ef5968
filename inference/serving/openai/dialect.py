"""OpenAI's chat and legacy completions dialect: {"error": {...}} bodies, `data:` events, and
[DONE] after a stream's last one (a broken stream too: its error event, then [DONE])."""

from __future__ import annotations

from inference.protocol.openai.chat import ChatCompletionRequest
from inference.protocol.openai.completions import CompletionRequest
from inference.protocol.openai.errors import error_body
from inference.serving.dialect import Dialect, Operation
from inference.serving.openai.plan import plan_chat_completion, plan_completion
from inference.serving.openai.writer import ChatCompletionWriter, CompletionWriter
from inference.serving.sse import DONE, data_event

DIALECT = Dialect(
    "openai",
    error_body,
    frame=data_event,
    done=DONE,
    operations={
        ChatCompletionRequest: Operation(plan_chat_completion, ChatCompletionWriter, "chatcmpl"),  # type: ignore[arg-type]
        CompletionRequest: Operation(plan_completion, CompletionWriter, "cmpl"),  # type: ignore[arg-type]
    },
)
