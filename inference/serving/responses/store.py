"""Stored responses through the ORM, always within the caller's scope: a key sees only the
responses it created, and a response of another key is reported as missing, never as
forbidden (that would confirm its id exists)."""

from __future__ import annotations

from datetime import UTC, datetime

from asgiref.sync import sync_to_async
from django.db.models import QuerySet

from apikeys.auth import Caller
from inference.protocol.errors import APIError
from inference.protocol.openai.responses import ResponseObject
from storedresponses.models import StoredResponse
from storedresponses.retention import auto_purge

# How far back a previous_response_id chain is followed; a longer one is refused.
MAX_CHAIN = 1000


def scoped(caller: Caller) -> QuerySet[StoredResponse]:
    return StoredResponse.objects.filter(api_key_id=caller.key_id)


def response_not_found(response_id: str, param: str | None = None) -> APIError:
    return APIError(
        f"Response with id '{response_id}' not found.",
        status=404,
        param=param,
        code="previous_response_not_found" if param == "previous_response_id" else None,
    )


async def get_row(caller: Caller, response_id: str, param: str | None = None) -> StoredResponse:
    try:
        return await scoped(caller).aget(pk=response_id)
    except StoredResponse.DoesNotExist:
        raise response_not_found(response_id, param) from None


async def conversation_before(caller: Caller, response_id: str) -> list[dict]:
    """The items of the chain that ends at `response_id`, oldest first: each response's input
    items, then its output items."""
    rows: list[StoredResponse] = []
    row: StoredResponse | None = await get_row(caller, response_id, "previous_response_id")
    while row is not None:
        rows.append(row)
        if len(rows) > MAX_CHAIN:
            raise APIError(
                f"The previous_response_id chain is longer than {MAX_CHAIN} responses.",
                param="previous_response_id",
            )
        parent = row.previous_response_id
        row = await scoped(caller).filter(pk=parent).afirst() if parent else None
    items: list[dict] = []
    for ancestor in reversed(rows):
        items += ancestor.input_items + ancestor.output
    return items


def _timestamp(seconds: int | None) -> datetime | None:
    return datetime.fromtimestamp(seconds, UTC) if seconds is not None else None


def _row(response: ResponseObject, caller: Caller, input_items: list[dict]) -> StoredResponse:
    data = response.model_dump(mode="json")
    return StoredResponse(
        id=response.id,
        api_key_id=caller.key_id,
        model=response.model,
        status=response.status,
        created_at=_timestamp(response.created_at),
        completed_at=_timestamp(response.completed_at),
        previous_response_id=response.previous_response_id,
        input_items=input_items,
        **{name: data[name] for name in KEPT_AS_IS},
    )


# Response fields stored in a column of the same name, in their wire form.
KEPT_AS_IS = (
    "instructions",
    "metadata",
    "temperature",
    "top_p",
    "max_output_tokens",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "text",
    "reasoning",
    "user",
    "output",
    "usage",
    "incomplete_details",
    "error",
)


def _save(row: StoredResponse) -> None:
    auto_purge()
    row.save(force_insert=True)


async def save(response: ResponseObject, caller: Caller, input_items: list[dict]) -> None:
    await sync_to_async(_save)(_row(response, caller, input_items))


def response_object(row: StoredResponse) -> ResponseObject:
    """A stored response as retrieval returns it: the object its creation returned."""
    created = int(row.created_at.timestamp())
    completed = int(row.completed_at.timestamp()) if row.completed_at else None
    return ResponseObject.model_validate(
        {
            "id": row.id,
            "created_at": created,
            "completed_at": completed,
            "status": row.status,
            "model": row.model,
            "previous_response_id": row.previous_response_id,
            "store": True,
            **{name: getattr(row, name) for name in KEPT_AS_IS},
        }
    )


async def delete(caller: Caller, response_id: str) -> None:
    deleted, _ = await scoped(caller).filter(pk=response_id).adelete()
    if not deleted:
        raise response_not_found(response_id)
