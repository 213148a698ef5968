"""Anthropic's Message Batches: create (every request checked as a Messages request before
the batch exists: a bad one is a 400 naming `requests.N.params...`), retrieve, list, cancel,
results (JSONL, once the batch has ended) and delete, each within the caller's own batches.
The lines run on the same runner as OpenAI's batches, through the Messages serving."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

from asgiref.sync import sync_to_async
from django.db import transaction
from django.db.models import Count
from django.http import QueryDict, StreamingHttpResponse
from django.utils import timezone
from pydantic import ValidationError

from apikeys.auth import Caller
from batches.models import Batch, BatchLine, message_batch_id
from inference.batches.openai_batches import cancel, get_batch
from inference.batches.runner import wake_runner
from inference.batches.scope import owned, rfc3339
from inference.edge.body import validation_error
from inference.protocol.anthropic.batches import (
    BatchResult,
    BatchResultLine,
    DeletedMessageBatch,
    MessageBatch,
    MessageBatchCounts,
    MessageBatchCreate,
    MessageBatchesQuery,
    MessageBatchList,
)
from inference.protocol.anthropic.requests import MessagesRequest
from inference.protocol.errors import APIError

ANTHROPIC = Batch.Dialect.ANTHROPIC
Status = Batch.Status
State = BatchLine.State
ENDED = (Status.COMPLETED, Status.CANCELLED, Status.EXPIRED, Status.FAILED)
WINDOW = timedelta(hours=24)


async def _counts(row: Batch) -> MessageBatchCounts:
    rows = BatchLine.objects.filter(batch=row).values("state").annotate(n=Count("id"))
    by_state = {r["state"]: r["n"] async for r in rows}
    return MessageBatchCounts(
        processing=by_state.get(State.PENDING, 0),
        succeeded=by_state.get(State.SUCCEEDED, 0),
        errored=by_state.get(State.ERRORED, 0),
        canceled=by_state.get(State.CANCELED, 0),
        expired=by_state.get(State.EXPIRED, 0),
    )


async def message_batch(row: Batch, base_url: str) -> MessageBatch:
    ended = row.status in ENDED
    status = "ended" if ended else "canceling" if row.status == Status.CANCELLING else "in_progress"
    ended_at = row.completed_at or row.cancelled_at or row.expired_at or row.failed_at
    return MessageBatch(
        id=row.id,
        processing_status=status,
        request_counts=await _counts(row),
        ended_at=rfc3339(ended_at),
        created_at=rfc3339(row.created_at) or "",
        expires_at=rfc3339(row.expires_at) or "",
        cancel_initiated_at=rfc3339(row.cancelling_at),
        results_url=f"{base_url}/v1/messages/batches/{row.id}/results" if ended else None,
    )


def _checked(body: MessageBatchCreate) -> list[tuple[str, dict]]:
    seen: set[str] = set()
    for i, item in enumerate(body.requests):
        if item.custom_id in seen:
            raise APIError(
                f"Duplicate custom_id '{item.custom_id}': each request's custom_id must be "
                "unique within the batch.",
                param=f"requests.{i}.custom_id",
            )
        seen.add(item.custom_id)
        try:
            MessagesRequest.model_validate(item.params)
        except ValidationError as exc:
            error = validation_error(exc)
            param = f"requests.{i}.params" + (f".{error.param}" if error.param else "")
            raise APIError(f"requests.{i}.params: {error.message}", param=param) from None
        if item.params.get("stream"):
            raise APIError(
                "Streaming is not supported in batches.", param=f"requests.{i}.params.stream"
            )
    return [(item.custom_id, item.params) for item in body.requests]


async def create(caller: Caller, body: MessageBatchCreate, base_url: str) -> MessageBatch:
    lines = _checked(body)
    now = timezone.now()
    row = Batch(
        id=message_batch_id(),
        api_key_id=caller.key_id,
        dialect=ANTHROPIC,
        endpoint="/v1/messages",
        status=Status.IN_PROGRESS,
        total=len(lines),
        created_at=now,
        in_progress_at=now,
        expires_at=now + WINDOW,
    )

    def save() -> None:
        with transaction.atomic():
            row.save(force_insert=True)
            BatchLine.objects.bulk_create(
                BatchLine(batch=row, index=i, custom_id=custom_id, body=params)
                for i, (custom_id, params) in enumerate(lines)
            )

    await sync_to_async(save)()
    wake_runner()
    return await message_batch(row, base_url)


def _not_found(ident: str) -> APIError:
    return APIError(f"No message batch found with id '{ident}'.", status=404)


async def _mine(caller: Caller, ident: str) -> Batch:
    try:
        return await get_batch(caller, ident, ANTHROPIC)
    except APIError:
        raise _not_found(ident) from None


async def retrieve(caller: Caller, ident: str, base_url: str) -> MessageBatch:
    return await message_batch(await _mine(caller, ident), base_url)


async def cancel_message_batch(caller: Caller, ident: str, base_url: str) -> MessageBatch:
    row = await _mine(caller, ident)
    if row.status not in ENDED:  # an ended batch is answered as it is
        row = await cancel(caller, ident, ANTHROPIC)
    return await message_batch(row, base_url)


async def list_message_batches(caller: Caller, query: QueryDict, base_url: str) -> MessageBatchList:
    asked = MessageBatchesQuery.model_validate(query.dict())
    rows = owned(Batch.objects, caller).filter(dialect=ANTHROPIC).order_by("-created_at", "-id")
    found = [row async for row in rows]
    ids = [row.id for row in found]
    if asked.after_id in ids:
        found = found[ids.index(asked.after_id) + 1 :]
    elif asked.before_id in ids:
        found = found[: ids.index(asked.before_id)][-asked.limit :]
    page = found[: asked.limit]
    data = [await message_batch(row, base_url) for row in page]
    return MessageBatchList(
        data=data,
        has_more=len(found) > len(page),
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
    )


def _result(line: BatchLine) -> BatchResultLine:
    if line.state == State.SUCCEEDED:
        result = BatchResult(type="succeeded", message=line.response)
    elif line.state == State.ERRORED:
        result = BatchResult(type="errored", error=line.response)
    elif line.state == State.EXPIRED:
        result = BatchResult(type="expired")
    else:
        result = BatchResult(type="canceled")
    return BatchResultLine(custom_id=line.custom_id, result=result)


async def results(caller: Caller, ident: str) -> StreamingHttpResponse:
    row = await _mine(caller, ident)
    if row.status not in ENDED:
        raise APIError(f"Message batch {ident} has not ended yet; its results come when it has.")
    lines = BatchLine.objects.filter(batch=row).order_by("index")

    async def streamed() -> AsyncIterator[bytes]:
        async for line in lines:
            yield (_result(line).model_dump_json() + "\n").encode()

    return StreamingHttpResponse(streamed(), content_type="application/x-jsonl")


async def delete(caller: Caller, ident: str) -> DeletedMessageBatch:
    row = await _mine(caller, ident)
    if row.status not in ENDED:
        raise APIError(
            f"Message batch {ident} is still processing: cancel it, and delete it once it ended."
        )
    await row.adelete()
    return DeletedMessageBatch(id=ident)
