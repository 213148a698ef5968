"""GET and DELETE /v1/responses/{id} and GET /v1/responses/{id}/input_items."""

from __future__ import annotations

from collections.abc import Mapping

from apikeys.auth import Caller
from inference.protocol.errors import APIError
from inference.protocol.openai.responses_object import ResponseObject
from inference.protocol.openai.responses_stored import DeletedResponse, InputItemList
from inference.serving.responses import store

MAX_LIMIT = 100


async def get_response(caller: Caller, response_id: str) -> ResponseObject:
    return store.response_object(await store.get_row(caller, response_id))


async def delete_response(caller: Caller, response_id: str) -> DeletedResponse:
    await store.delete(caller, response_id)
    return DeletedResponse(id=response_id)


def _limit(query: Mapping[str, str]) -> int:
    text = query.get("limit", "20")
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise APIError(f"limit must be an integer from 1 to {MAX_LIMIT}.", param="limit")
    return int(text)


def _order(query: Mapping[str, str]) -> str:
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise APIError("order must be 'asc' or 'desc'.", param="order")
    return order


async def list_input_items(
    caller: Caller, response_id: str, query: Mapping[str, str]
) -> InputItemList:
    """A page of the response's input items, newest first unless order=asc, after the item
    whose id is `after` (OpenAI's cursor)."""
    limit, order = _limit(query), _order(query)
    items = await store.input_items_of(caller, response_id)
    if order == "desc":
        items.reverse()
    after = query.get("after")
    if after:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise APIError(f"No input item with id '{after}' in this response.", param="after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return InputItemList(
        data=page,
        first_id=page[0]["id"] if page else None,
        last_id=page[-1]["id"] if page else None,
        has_more=len(items) > limit,
    )
