"""OpenAI's Batch API: POST /v1/batches' body, the batch object and its list, the input
file's lines, and the output and error files' lines (`{"id": "batch_req_...", "custom_id",
"response": {"status_code", "request_id", "body"}, "error"}`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from inference.protocol.wire import RequestModel

BatchEndpoint = Literal[
    "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"
]
BATCH_ENDPOINTS: tuple[str, ...] = BatchEndpoint.__args__  # type: ignore[attr-defined]


class BatchCreateRequest(RequestModel):
    input_file_id: str
    endpoint: BatchEndpoint
    completion_window: Literal["24h"]
    metadata: dict[str, str] | None = Field(default=None, max_length=16)


class BatchError(BaseModel):
    code: str | None = None
    message: str | None = None
    param: str | None = None
    line: int | None = None


class BatchErrors(BaseModel):
    object: Literal["list"] = "list"
    data: list[BatchError]


class BatchRequestCounts(BaseModel):
    total: int
    completed: int
    failed: int


class BatchObject(BaseModel):
    id: str
    object: Literal["batch"] = "batch"
    endpoint: str
    errors: BatchErrors | None = None
    input_file_id: str
    completion_window: str
    status: str
    output_file_id: str | None = None
    error_file_id: str | None = None
    created_at: int
    in_progress_at: int | None = None
    expires_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    request_counts: BatchRequestCounts
    metadata: dict[str, str] | None = None


class BatchList(BaseModel):
    object: Literal["list"] = "list"
    data: list[BatchObject]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


class BatchesQuery(BaseModel):
    limit: int = Field(20, ge=1, le=100)
    after: str = ""

    model_config = {"extra": "ignore"}


class LineResponse(BaseModel):
    status_code: int
    request_id: str
    body: Any


class LineError(BaseModel):
    code: str
    message: str


class BatchOutputLine(BaseModel):
    id: str
    custom_id: str
    response: LineResponse | None
    error: LineError | None = None
