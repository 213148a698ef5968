"""OpenAI's Batch API (/v1/batches: create, list, retrieve, cancel) and Anthropic's Message
Batches (/v1/messages/batches: create, list, retrieve, cancel, results, delete), each in its
dialect; a key reaches only its own batches."""

from __future__ import annotations

from django.http import HttpRequest, StreamingHttpResponse

from inference.batches import anthropic_batches, openai_batches
from inference.edge import API_KEY, endpoint
from inference.edge.auth import ANTHROPIC_KEY
from inference.edge.body import parse_body
from inference.edge.dialects import ANTHROPIC
from inference.protocol.anthropic.batches import (
    DeletedMessageBatch,
    MessageBatch,
    MessageBatchCreate,
    MessageBatchesQuery,
    MessageBatchList,
)
from inference.protocol.openai.batches import (
    BatchCreateRequest,
    BatchesQuery,
    BatchList,
    BatchObject,
)
from inference.serving.context import RequestContext


@endpoint(
    "GET",
    "POST",
    auth=API_KEY,
    response={"GET": BatchList, "POST": BatchObject},
    query=BatchesQuery,
)
async def batches_collection(request: HttpRequest, ctx: RequestContext) -> BatchList | BatchObject:
    if request.method == "POST":
        body = parse_body(request, BatchCreateRequest)  # GET on the same URL has none
        return await openai_batches.create(ctx.caller, body)  # type: ignore[arg-type]
    return await openai_batches.list_batches(ctx.caller, request.GET)


@endpoint("GET", auth=API_KEY, response=BatchObject)
async def batch_detail(request: HttpRequest, ctx: RequestContext, batch_id: str) -> BatchObject:
    return await openai_batches.retrieve(ctx.caller, batch_id)


@endpoint("POST", auth=API_KEY, response=BatchObject)
async def batch_cancel(request: HttpRequest, ctx: RequestContext, batch_id: str) -> BatchObject:
    return await openai_batches.cancel_batch(ctx.caller, batch_id)


def _base(request: HttpRequest) -> str:
    return request.build_absolute_uri("/").rstrip("/")


@endpoint(
    "GET",
    "POST",
    auth=ANTHROPIC_KEY,
    dialect=ANTHROPIC,
    response={"GET": MessageBatchList, "POST": MessageBatch},
    query=MessageBatchesQuery,
)
async def message_batches(
    request: HttpRequest, ctx: RequestContext
) -> MessageBatchList | MessageBatch:
    if request.method == "POST":
        body = parse_body(request, MessageBatchCreate)  # GET on the same URL has none
        return await anthropic_batches.create(ctx.caller, body, _base(request))  # type: ignore[arg-type]
    return await anthropic_batches.list_message_batches(ctx.caller, request.GET, _base(request))


@endpoint(
    "GET",
    "DELETE",
    auth=ANTHROPIC_KEY,
    dialect=ANTHROPIC,
    response={"GET": MessageBatch, "DELETE": DeletedMessageBatch},
)
async def message_batch_detail(
    request: HttpRequest, ctx: RequestContext, batch_id: str
) -> MessageBatch | DeletedMessageBatch:
    if request.method == "DELETE":
        return await anthropic_batches.delete(ctx.caller, batch_id)
    return await anthropic_batches.retrieve(ctx.caller, batch_id, _base(request))


@endpoint("POST", auth=ANTHROPIC_KEY, dialect=ANTHROPIC, response=MessageBatch)
async def message_batch_cancel(
    request: HttpRequest, ctx: RequestContext, batch_id: str
) -> MessageBatch:
    return await anthropic_batches.cancel_message_batch(ctx.caller, batch_id, _base(request))


@endpoint("GET", auth=ANTHROPIC_KEY, dialect=ANTHROPIC)
async def message_batch_results(
    request: HttpRequest, ctx: RequestContext, batch_id: str
) -> StreamingHttpResponse:
    return await anthropic_batches.results(ctx.caller, batch_id)
