"""The stored responses' own endpoints: DELETE /v1/responses/{id}'s answer and
GET /v1/responses/{id}/input_items' query and page (GET /v1/responses/{id} answers the
response object itself, responses_object)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from inference.protocol.openai.common import JSONObject


class DeletedResponse(BaseModel):
    id: str
    object: Literal["response"] = "response"
    deleted: Literal[True] = True


class InputItemList(BaseModel):
    """GET /v1/responses/{id}/input_items: stored items as the SDK's ResponseItem union."""

    object: Literal["list"] = "list"
    data: list[JSONObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class InputItemsQuery(BaseModel):
    """GET /v1/responses/{id}/input_items's query string: a page of items, newest first unless
    order=asc, after the item whose id is `after` (OpenAI's cursor)."""

    limit: int = Field(20, ge=1, le=100)
    order: Literal["asc", "desc"] = "desc"
    after: str = ""  # none: from the first item
