"""OpenAI's Files API: the file object, its list, a deletion's answer, and the multipart
upload's fields (POST /v1/files: `file`, `purpose`, `expires_after[anchor]`,
`expires_after[seconds]`)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from inference.protocol.wire import RequestModel

# What POST /v1/files takes, as OpenAI lists it; `batch_output` is only ever written by us.
UPLOAD_PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")


class ExpiresAfter(RequestModel):
    anchor: Literal["created_at"]
    # OpenAI's bounds: an hour to thirty days.
    seconds: int = Field(ge=3600, le=2_592_000)


class FileUpload(RequestModel):
    """The multipart form of POST /v1/files (the edge reads forms for models that say
    `multipart`: inference/edge/body.py). `file` is the uploaded file as the edge hands it
    over (something with `name`, `size` and `chunks()`)."""

    multipart: ClassVar[bool] = True

    file: Any = None
    purpose: str | None = None
    expires_after: ExpiresAfter | None = None


class FileObject(BaseModel):
    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    filename: str
    purpose: str
    status: Literal["uploaded", "processed", "error"] = "processed"
    expires_at: int | None = None
    status_details: str | None = None


class FileList(BaseModel):
    object: Literal["list"] = "list"
    data: list[FileObject]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


class FileDeleted(BaseModel):
    id: str
    object: Literal["file"] = "file"
    deleted: bool = True


class FilesQuery(BaseModel):
    """GET /v1/files's query: newest first unless order=asc, after the file whose id is
    `after` (OpenAI's cursor), `purpose` to list one kind only."""

    purpose: str = ""
    limit: int = Field(10_000, ge=1, le=10_000)
    order: Literal["asc", "desc"] = "desc"
    after: str = ""

    model_config = {"extra": "ignore"}
