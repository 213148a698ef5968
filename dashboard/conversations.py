"""The chat page's conversations as JSON: each staff member lists, opens, saves, renames and
deletes their own (another member's are a 404, as if they did not exist). The admin token
names no person, so it has no conversations to keep."""

from __future__ import annotations

from typing import Literal

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from pydantic import BaseModel, ConfigDict, Field

from dashboard.models import Conversation
from inference.edge import PLAYGROUND, endpoint
from inference.edge.body import parse_body
from inference.protocol.errors import APIError
from inference.serving.context import RequestContext

MAX_TURNS = 1000


class Sampling(BaseModel):
    model_config = ConfigDict(extra="forbid")

    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    # The page's tools box: sent as the request's `tools`, checked there.
    tools: list[dict] | None = Field(None, max_length=128)


class Turn(BaseModel):
    # An assistant turn also keeps what the page showed under it (reasoning, tool calls,
    # finish reason, usage, tokens/s); a user turn its attached images.
    model_config = ConfigDict(extra="allow")

    role: Literal["user", "assistant"]
    content: str = ""


class ConversationFields(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str | None = Field(None, max_length=200)
    model: str | None = Field(None, max_length=200)
    system_prompt: str | None = None
    sampling: Sampling | None = None
    turns: list[Turn] | None = Field(None, max_length=MAX_TURNS)

    def apply(self, conversation: Conversation) -> None:
        for name in ("title", "model", "system_prompt"):
            if (value := getattr(self, name)) is not None:
                setattr(conversation, name, value)
        if self.sampling is not None:
            conversation.sampling = self.sampling.model_dump(exclude_none=True)
        if self.turns is not None:
            conversation.turns = [turn.model_dump() for turn in self.turns]


async def _owner(request: HttpRequest):
    user = await request.auser()
    if not user.is_authenticated:  # the admin token: an operator, not a person
        raise APIError(
            "Conversations belong to a staff login; the admin token has none.",
            status=403,
            type="permission_error",
            code="permission_denied",
        )
    return user


@endpoint("GET", "POST", auth=PLAYGROUND)
async def conversations(request: HttpRequest, ctx: RequestContext) -> dict:
    """GET: the member's conversations, newest first. POST: a new one from the fields given."""
    owner = await _owner(request)
    if request.method == "GET":
        rows = Conversation.objects.filter(owner=owner)
        return {"data": [row.summary() async for row in rows]}
    fields = parse_body(request, ConversationFields)
    if not fields.model:
        raise APIError("A conversation needs the model it talks to.", param="model")
    conversation = Conversation(owner=owner)
    fields.apply(conversation)
    await sync_to_async(conversation.save)()
    return conversation.document()


@endpoint("GET", "PATCH", "DELETE", auth=PLAYGROUND)
async def conversation(request: HttpRequest, ctx: RequestContext, pk: int) -> dict:
    """GET: one conversation whole. PATCH: the fields given replace theirs. DELETE: gone."""
    owner = await _owner(request)
    found = await Conversation.objects.filter(owner=owner, pk=pk).afirst()
    if found is None:
        raise APIError(f"No conversation {pk}.", status=404, code="not_found")
    if request.method == "DELETE":
        await found.adelete()
        return {"id": pk, "deleted": True}
    if request.method == "PATCH":
        parse_body(request, ConversationFields).apply(found)
        await sync_to_async(found.save)()
    return found.document()
