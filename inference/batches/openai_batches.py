"""OpenAI's Batch API's work: create (the input file must be the caller's, of purpose batch;
its lines are checked by the runner while the batch is `validating`), retrieve, list and
cancel, each within the caller's own batches."""

from __future__ import annotations

from datetime import timedelta

from django.http import QueryDict
from django.utils import timezone

from apikeys.auth import Caller
from batches.models import Batch, StoredFile, batch_id
from inference.batches.files import get_file
from inference.batches.runner import wake_runner
from inference.batches.scope import epoch, owned, page
from inference.protocol.errors import APIError
from inference.protocol.openai.batches import (
    BatchCreateRequest,
    BatchErrors,
    BatchesQuery,
    BatchList,
    BatchObject,
    BatchRequestCounts,
)

WINDOWS = {"24h": timedelta(hours=24)}
Status = Batch.Status


def batch_object(row: Batch) -> BatchObject:
    times = {
        name: epoch(getattr(row, name))
        for name in (
            "in_progress_at",
            "expires_at",
            "finalizing_at",
            "completed_at",
            "failed_at",
            "expired_at",
            "cancelling_at",
            "cancelled_at",
        )
    }
    return BatchObject(
        id=row.id,
        endpoint=row.endpoint,
        errors=BatchErrors(data=row.errors) if row.errors else None,
        input_file_id=row.input_file_name,
        completion_window=row.completion_window,
        status=row.status,
        output_file_id=row.output_file_id,
        error_file_id=row.error_file_id,
        created_at=epoch(row.created_at) or 0,
        request_counts=BatchRequestCounts(
            total=row.total, completed=row.completed, failed=row.failed
        ),
        metadata=row.metadata,
        **times,
    )


def batch_not_found(ident: str) -> APIError:
    return APIError(f"No batch found with id '{ident}'.", status=404, param="batch_id")


async def get_batch(caller: Caller, ident: str, dialect: str = Batch.Dialect.OPENAI) -> Batch:
    row = await owned(Batch.objects, caller).filter(pk=ident, dialect=dialect).afirst()
    if row is None:
        raise batch_not_found(ident)
    return row


async def create(caller: Caller, body: BatchCreateRequest) -> BatchObject:
    source = await get_file(caller, body.input_file_id, param="input_file_id")
    if source.purpose != StoredFile.Purpose.BATCH:
        raise APIError(
            f"The input file {source.id} has purpose '{source.purpose}'; a batch's input "
            "file must be uploaded with purpose 'batch'.",
            param="input_file_id",
            code="invalid_file_purpose",
        )
    now = timezone.now()
    row = Batch(
        id=batch_id(),
        api_key_id=caller.key_id,
        endpoint=body.endpoint,
        input_file=source,
        input_file_name=source.id,
        completion_window=body.completion_window,
        metadata=body.metadata,
        status=Status.VALIDATING,
        created_at=now,
        expires_at=now + WINDOWS[body.completion_window],
    )
    await row.asave(force_insert=True)
    wake_runner()
    return batch_object(row)


async def retrieve(caller: Caller, ident: str) -> BatchObject:
    return batch_object(await get_batch(caller, ident))


async def cancel(caller: Caller, ident: str, dialect: str = Batch.Dialect.OPENAI) -> Batch:
    """Active batches become `cancelling` (the runner ends them `cancelled`); an ended one is
    refused, as OpenAI refuses it."""
    row = await get_batch(caller, ident, dialect)
    if row.status in (Status.CANCELLING, Status.CANCELLED):
        return row
    if row.status not in Batch.ACTIVE:
        raise APIError(
            f"Cannot cancel a batch with status '{row.status}'.",
            status=409,
            code="batch_not_cancellable",
        )
    now = timezone.now()
    moved = await Batch.objects.filter(pk=row.pk, status__in=Batch.ACTIVE).aupdate(
        status=Status.CANCELLING, cancelling_at=now
    )
    wake_runner()
    return await Batch.objects.aget(pk=row.pk) if moved else row


async def cancel_batch(caller: Caller, ident: str) -> BatchObject:
    return batch_object(await cancel(caller, ident))


async def list_batches(caller: Caller, query: QueryDict) -> BatchList:
    asked = BatchesQuery.model_validate(query.dict())
    rows = owned(Batch.objects, caller).filter(dialect=Batch.Dialect.OPENAI)
    found, more = await page(rows, asked.after, asked.limit)
    data = [batch_object(row) for row in found]
    return BatchList(
        data=data,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
        has_more=more,
    )
