"""The Files API's work: upload, list, retrieve, content and delete, each within the caller's
own files (another key's file is reported missing, as if it did not exist)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db.models import Sum
from django.http import QueryDict, StreamingHttpResponse
from django.utils import timezone
from django.utils.http import content_disposition_header

from apikeys.auth import Caller
from batches import storage
from batches.models import StoredFile
from batches.retention import delete_files
from inference.batches.scope import epoch, owned, page
from inference.protocol.errors import APIError
from inference.protocol.openai.files import (
    UPLOAD_PURPOSES,
    FileDeleted,
    FileList,
    FileObject,
    FilesQuery,
    FileUpload,
)


def file_object(row: StoredFile) -> FileObject:
    return FileObject(
        id=row.id,
        bytes=row.bytes,
        created_at=epoch(row.created_at) or 0,
        filename=row.filename,
        purpose=row.purpose,
        expires_at=epoch(row.expires_at),
    )


def file_not_found(file_id: str, param: str = "id") -> APIError:
    return APIError(f"No such File object: {file_id}", status=404, param=param)


def _purpose_of(form: FileUpload) -> str:
    if form.file is None or not hasattr(form.file, "chunks"):
        raise APIError("Missing required parameter: 'file'.", param="file")
    if not form.purpose:
        raise APIError("Missing required parameter: 'purpose'.", param="purpose")
    if form.purpose not in UPLOAD_PURPOSES:
        listed = ", ".join(f"'{p}'" for p in UPLOAD_PURPOSES)
        raise APIError(
            f"Invalid value for purpose: '{form.purpose}'. Supported values are: {listed}.",
            param="purpose",
        )
    return form.purpose


async def used_bytes(caller: Caller) -> int:
    total = await owned(StoredFile.objects, caller).aaggregate(total=Sum("bytes"))
    return total["total"] or 0


async def upload(caller: Caller, form: FileUpload) -> FileObject:
    purpose = _purpose_of(form)
    size = form.file.size
    cap = settings.MAX_FILE_BYTES
    if size > cap:
        raise APIError(
            f"File is too large: {size} bytes; this server takes at most {cap} (MAX_FILE_BYTES).",
            status=413,
            param="file",
            code="file_too_large",
        )
    quota = settings.MAX_FILE_BYTES_PER_KEY
    if quota and await used_bytes(caller) + size > quota:
        raise APIError(
            f"Storing this file would pass this key's {quota} bytes of files "
            "(MAX_FILE_BYTES_PER_KEY); delete some first.",
            status=429,
            type="insufficient_quota",
            code="file_storage_quota_exceeded",
        )
    expires_in = form.expires_after.seconds if form.expires_after else None
    name = (form.file.name or "").replace("\x00", "") or "upload"  # PostgreSQL: no NUL in text
    row = await store(caller, purpose, name, form.file.chunks(), expires_in, limit=cap)
    return file_object(row)


async def store(
    caller: Caller,
    purpose: str,
    filename: str,
    chunks,
    expires_in: int | None = None,
    limit: int | None = None,
) -> StoredFile:
    """A new file of the caller's: its content written owner-only first, then its row (a row
    is never without its content)."""
    now = timezone.now()
    row = StoredFile(
        api_key_id=caller.key_id,
        filename=filename[:512],
        purpose=purpose,
        created_at=now,
        expires_at=now + timedelta(seconds=expires_in) if expires_in else None,
    )
    try:
        row.bytes = await sync_to_async(storage.write)(row.id, chunks, limit)
    except storage.TooLarge:
        raise APIError("File is too large.", status=413, param="file") from None
    try:
        await row.asave(force_insert=True)
    except BaseException:
        storage.remove(row.id)
        raise
    return row


async def get_file(caller: Caller, file_id: str, param: str = "id") -> StoredFile:
    row = await owned(StoredFile.objects, caller).filter(pk=file_id).afirst()
    if row is None:
        raise file_not_found(file_id, param)
    return row


async def retrieve(caller: Caller, file_id: str) -> FileObject:
    return file_object(await get_file(caller, file_id))


async def delete(caller: Caller, file_id: str) -> FileDeleted:
    row = await get_file(caller, file_id)
    await sync_to_async(delete_files)([row.id])
    return FileDeleted(id=row.id)


async def list_files(caller: Caller, query: QueryDict) -> FileList:
    asked = FilesQuery.model_validate(query.dict())
    rows = owned(StoredFile.objects, caller)
    if asked.purpose:
        rows = rows.filter(purpose=asked.purpose)
    found, more = await page(rows, asked.after, asked.limit, asked.order == "desc")
    data = [file_object(row) for row in found]
    return FileList(
        data=data,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
        has_more=more,
    )


async def content(caller: Caller, file_id: str) -> StreamingHttpResponse:
    row = await get_file(caller, file_id)
    chunks = storage.read_chunks(row.id)

    async def streamed() -> AsyncIterator[bytes]:
        while chunk := await sync_to_async(next, thread_sensitive=False)(chunks, b""):
            yield chunk

    response = StreamingHttpResponse(streamed(), content_type="application/octet-stream")
    response["Content-Length"] = str(row.bytes)
    response["Content-Disposition"] = content_disposition_header(True, row.filename)
    return response
