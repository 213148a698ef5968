"""Anthropic's Messages API: POST /v1/messages and /v1/messages/count_tokens. Errors, auth
(x-api-key or bearer) and broken streams are in Anthropic's dialect."""

from __future__ import annotations

from django.http import HttpRequest

from inference.edge import endpoint
from inference.edge.auth import ANTHROPIC_KEY
from inference.edge.dialects import ANTHROPIC
from inference.protocol.anthropic.events import MessageStreamEvent
from inference.protocol.anthropic.requests import CountTokensRequest, MessagesRequest
from inference.protocol.anthropic.responses import MessageResponse, TokenCount
from inference.serving.anthropic.count_tokens import count_message_tokens
from inference.serving.context import RequestContext
from inference.serving.pipeline import answer
from inference.serving.sse import EventStream


@endpoint(
    "POST",
    body=MessagesRequest,
    auth=ANTHROPIC_KEY,
    dialect=ANTHROPIC,
    record=True,
    response=MessageResponse,
    stream=MessageStreamEvent,
)
async def messages(
    request: HttpRequest, ctx: RequestContext, body: MessagesRequest
) -> MessageResponse | EventStream:
    return await answer(ANTHROPIC, body, ctx)


@endpoint(
    "POST",
    body=CountTokensRequest,
    auth=ANTHROPIC_KEY,
    dialect=ANTHROPIC,
    record=True,
    response=TokenCount,
)
async def count_tokens(
    request: HttpRequest, ctx: RequestContext, body: CountTokensRequest
) -> TokenCount:
    return await count_message_tokens(body, ctx)
