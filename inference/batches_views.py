"""OpenAI's Batch API (/v1/batches: create, list, retrieve, cancel) and Anthropic's Message
Batches (/v1/messages/batches: create, list, retrieve, cancel, results, delete), each in its
dialect; a key reaches only its own batches."""

from __future__ import annotations

from django.http import HttpRequest

from inference.batches import openai_batches
from inference.edge import API_KEY, endpoint
from inference.edge.body import parse_body
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
