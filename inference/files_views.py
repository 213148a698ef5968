"""OpenAI's Files API: POST /v1/files (a multipart upload), GET /v1/files, and one file's
GET, DELETE and GET .../content. A key reaches only the files it uploaded (and its batches'
output files); another key's are missing."""

from __future__ import annotations

from django.http import HttpRequest, StreamingHttpResponse

from inference.batches import files
from inference.edge import API_KEY, endpoint
from inference.edge.body import parse_body
from inference.protocol.openai.files import (
    FileDeleted,
    FileList,
    FileObject,
    FilesQuery,
    FileUpload,
)
from inference.serving.context import RequestContext


@endpoint(
    "GET",
    "POST",
    auth=API_KEY,
    response={"GET": FileList, "POST": FileObject},
    query=FilesQuery,
)
async def files_collection(request: HttpRequest, ctx: RequestContext) -> FileList | FileObject:
    if request.method == "POST":
        # The form is read here, not declared as the body: GET on the same URL has none.
        form = parse_body(request, FileUpload)
        return await files.upload(ctx.caller, form)  # type: ignore[arg-type]
    return await files.list_files(ctx.caller, request.GET)


@endpoint("GET", "DELETE", auth=API_KEY, response={"GET": FileObject, "DELETE": FileDeleted})
async def file_detail(
    request: HttpRequest, ctx: RequestContext, file_id: str
) -> FileObject | FileDeleted:
    if request.method == "DELETE":
        return await files.delete(ctx.caller, file_id)
    return await files.retrieve(ctx.caller, file_id)


@endpoint("GET", auth=API_KEY)
async def file_content(
    request: HttpRequest, ctx: RequestContext, file_id: str
) -> StreamingHttpResponse:
    return await files.content(ctx.caller, file_id)
