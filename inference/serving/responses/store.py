"""Stored responses through the ORM, always within the caller's scope: a key sees only the
responses it created, and a response of another key is reported as missing, never as
forbidden (that would confirm its id exists).

What is stored is bounded (README "OpenAI Responses", What is stored): each item and each
response by size, each key's total by a quota. A store=true request is measured before any
generation (`admit_to_store`: its input items, instructions, tools...), so one over a limit
costs no engine work and stores nothing. Output is the model's own, bounded by
max_output_tokens; the whole row is measured again when it is saved, and a response whose
output breaks a cap anyway is refused there (413) rather than stored or half-stored."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet

from apikeys.auth import Caller
from inference.protocol.errors import APIError
from inference.protocol.openai.responses_object import ResponseObject
from inference.protocol.openai.responses_request import ResponseRequest
from storedresponses.models import StoredResponse
from storedresponses.sizes import json_bytes, stored_by

log = logging.getLogger(__name__)
CHAIN_CHUNK = 500  # responses whose items one query loads (below SQLite's parameter limit)


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


async def input_items_of(caller: Caller, response_id: str) -> list[dict]:
    """One response's input items, without reading the rest of its row."""
    rows = scoped(caller).filter(pk=response_id).values_list("input_items", flat=True)
    items = await rows.afirst()
    if items is None:
        raise response_not_found(response_id)
    return items


# ------------------------------------------------------------------ previous_response_id


async def conversation_before(caller: Caller, response_id: str) -> list[dict]:
    """The items of the chain that ends at `response_id`, oldest first: each response's input
    items, then its output items. The chain is walked on ids and sizes alone, and only its
    items are loaded, once it is known to be within RESPONSES_MAX_CHAIN_DEPTH and
    RESPONSES_MAX_CHAIN_BYTES."""
    return await sync_to_async(_conversation_before)(caller, response_id)


def _conversation_before(caller: Caller, response_id: str) -> list[dict]:
    ids = chain_ids(caller, response_id)
    ids.reverse()
    loaded: dict[str, list[dict]] = {}
    for start in range(0, len(ids), CHAIN_CHUNK):
        chunk = ids[start : start + CHAIN_CHUNK]
        rows = scoped(caller).filter(pk__in=chunk).values_list("id", "input_items", "output")
        loaded.update((pk, inputs + output) for pk, inputs, output in rows)
    # A response deleted meanwhile is left out, as a deleted parent ends a chain.
    return [item for pk in ids for item in loaded.get(pk, [])]


def chain_ids(caller: Caller, response_id: str) -> list[str]:
    """The chain's ids, newest first: one row's parent and size at a time, no JSON read. The
    named response must exist in the caller's scope (404); a missing parent ends the chain."""
    links = scoped(caller).order_by().values_list("previous_response_id", "items_bytes")
    ids: list[str] = []
    weight = 0
    current: str | None = response_id
    while current is not None:
        link = links.filter(pk=current).first()
        if link is None:
            if not ids:
                raise response_not_found(response_id, "previous_response_id")
            break
        ids.append(current)
        weight += link[1]
        check_chain(len(ids), weight)
        current = link[0]
    return ids


def check_chain(depth: int, weight: int) -> None:
    if settings.RESPONSES_MAX_CHAIN_DEPTH and depth > settings.RESPONSES_MAX_CHAIN_DEPTH:
        raise APIError(
            "The previous_response_id chain is longer than "
            f"{settings.RESPONSES_MAX_CHAIN_DEPTH} responses (RESPONSES_MAX_CHAIN_DEPTH); "
            "send the conversation as input, or a shorter chain.",
            param="previous_response_id",
            code="chain_too_long",
        )
    cap = settings.RESPONSES_MAX_CHAIN_BYTES
    if cap and weight > cap:
        raise APIError(
            f"The previous_response_id chain's items take more than {cap} bytes "
            "(RESPONSES_MAX_CHAIN_BYTES); send the conversation as input, or a shorter chain.",
            param="previous_response_id",
            code="chain_too_large",
        )


# -------------------------------------------------------------------------- size limits


def too_large(message: str, param: str, code: str) -> APIError:
    return APIError(
        f"{message} Send store: false to answer without storing it.",
        status=413,
        param=param,
        code=code,
    )


def check_items(items: list[dict], names: list[str]) -> int:
    """Each item within RESPONSES_MAX_ITEM_BYTES (413 naming the first one over it, by its
    name in `names`); returns their size as one stored list."""
    cap = settings.RESPONSES_MAX_ITEM_BYTES
    total = 2 + 2 * max(len(items) - 1, 0)  # "[" and "]", ", " between items
    for item, name in zip(items, names, strict=True):
        size = json_bytes(item)
        if cap and size > cap:
            raise too_large(
                f"The item {name} takes {size} bytes as stored; this server stores items of "
                f"at most {cap} bytes (RESPONSES_MAX_ITEM_BYTES).",
                name,
                "item_too_large",
            )
        total += size
    return total


def check_response(sizes: dict[str, int]) -> int:
    """The response's size (`sizes`: by field) within RESPONSES_MAX_STORED_BYTES (413 naming
    its largest field); returns it."""
    total = sum(sizes.values())
    cap = settings.RESPONSES_MAX_STORED_BYTES
    if cap and total > cap:
        largest = max(sizes, key=sizes.__getitem__)
        raise too_large(
            f"This response takes {total} bytes as stored ({largest}: {sizes[largest]}); this "
            f"server stores at most {cap} bytes per response (RESPONSES_MAX_STORED_BYTES).",
            largest,
            "response_too_large",
        )
    return total


def check_quota(caller: Caller, adding: int) -> None:
    """The caller's stored bytes plus `adding` within RESPONSES_MAX_BYTES_PER_KEY (429)."""
    quota = settings.RESPONSES_MAX_BYTES_PER_KEY
    if not quota:
        return
    used = stored_by(caller.key_id)
    if used + adding > quota:
        whose = "the anonymous callers'" if caller.key_id is None else "this API key's"
        raise APIError(
            f"Storing this response ({adding} bytes) would take {whose} stored responses past "
            f"their quota of {quota} bytes ({used} stored; RESPONSES_MAX_BYTES_PER_KEY). Delete "
            "stored responses (DELETE /v1/responses/{id}), or send store: false.",
            status=429,
            type="insufficient_quota",
            code="insufficient_quota",
        )


# Request fields a response stores beside its items (as the response echoes them).
STORED_REQUEST_FIELDS = ("instructions", "metadata", "tools", "tool_choice", "text", "reasoning")


def input_names(request: ResponseRequest, count: int) -> list[str]:
    """How errors name each input item: "input" for a string input, else "input.I"."""
    return ["input"] if isinstance(request.input, str) else [f"input.{i}" for i in range(count)]


async def admit_to_store(request: ResponseRequest, new_items: list[dict], caller: Caller) -> None:
    """Before any generation: a store=true request's input items, and what it would store
    without its output, within the size caps (413), and the caller within its quota (429).
    store=false requests are not measured."""
    if not request.store:
        return
    sizes = request.model_dump(mode="json", include={*STORED_REQUEST_FIELDS, "user"})
    by_field = {name: json_bytes(value) for name, value in sizes.items()}
    by_field["input"] = check_items(new_items, input_names(request, len(new_items)))
    size = check_response(by_field)
    await sync_to_async(check_quota)(caller, size)


# ---------------------------------------------------------------------------- writing


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


def check_row(row: StoredResponse) -> None:
    """The row as it will be written within the caps: its output items one by one (its input
    items are the ones admit_to_store measured before any generation), then the whole."""
    check_items(row.output, [f"output.{i}" for i in range(len(row.output))])
    sizes = row.measure()
    sizes["input"] = sizes.pop("input_items")  # as the request names it
    check_response(sizes)


def _save(row: StoredResponse) -> None:
    # The response and its items are one row; the transaction makes the write all or nothing
    # whatever else a save may come to write beside it.
    with transaction.atomic():
        row.save(force_insert=True)


async def save(response: ResponseObject, caller: Caller, input_items: list[dict]) -> None:
    row = _row(response, caller, input_items)
    try:
        check_row(row)
    except APIError as exc:
        log.warning("response %s not stored: %s", response.id, exc.message)
        raise
    await sync_to_async(_save)(row)


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
    # Only the id is read: Django's delete otherwise loads the whole row first.
    deleted, _ = await scoped(caller).filter(pk=response_id).only("pk").adelete()
    if not deleted:
        raise response_not_found(response_id)
