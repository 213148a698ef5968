"""Anthropic's Message Batches: POST /v1/messages/batches' body, the batch object, its list,
a deletion's answer, and the results file's lines (`{"custom_id", "result": {"type":
"succeeded", "message": {...}}}`, or errored with Anthropic's error body, canceled, expired).
Times are RFC 3339 strings, as Anthropic writes them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from inference.protocol.wire import RequestModel


class BatchRequestItem(RequestModel):
    custom_id: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    # Checked as a Messages request, each on its own (requests.N.params... in an error), and
    # kept as the client sent it.
    params: dict[str, Any]


class MessageBatchCreate(RequestModel):
    requests: list[BatchRequestItem] = Field(min_length=1)


class MessageBatchCounts(BaseModel):
    processing: int = 0
    succeeded: int = 0
    errored: int = 0
    canceled: int = 0
    expired: int = 0


class MessageBatch(BaseModel):
    id: str
    type: Literal["message_batch"] = "message_batch"
    processing_status: Literal["in_progress", "canceling", "ended"]
    request_counts: MessageBatchCounts
    ended_at: str | None = None
    created_at: str
    expires_at: str
    archived_at: str | None = None
    cancel_initiated_at: str | None = None
    results_url: str | None = None


class MessageBatchList(BaseModel):
    data: list[MessageBatch]
    has_more: bool = False
    first_id: str | None = None
    last_id: str | None = None


class MessageBatchesQuery(BaseModel):
    limit: int = Field(20, ge=1, le=1000)
    after_id: str = ""
    before_id: str = ""

    model_config = {"extra": "ignore"}


class DeletedMessageBatch(BaseModel):
    id: str
    type: Literal["message_batch_deleted"] = "message_batch_deleted"


class BatchResult(BaseModel):
    type: Literal["succeeded", "errored", "canceled", "expired"]
    message: dict[str, Any] | None = Field(default=None, exclude_if=lambda v: v is None)
    error: dict[str, Any] | None = Field(default=None, exclude_if=lambda v: v is None)


class BatchResultLine(BaseModel):
    custom_id: str
    result: BatchResult
