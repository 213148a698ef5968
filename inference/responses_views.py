"""The OpenAI Responses API: create, retrieve, delete, and list a response's input items.
Declared at the edge in the RESPONSES dialect (OpenAI's error body; a broken stream ends with
an `error` event and no [DONE]); a key reaches only the responses it created."""

from __future__ import annotations

from django.http import HttpRequest

from inference.edge import API_KEY, endpoint
from inference.edge.dialects import RESPONSES
from inference.protocol.openai.responses_events import ResponseLifecycleEvent
from inference.protocol.openai.responses_object import ResponseObject
from inference.protocol.openai.responses_request import ResponseRequest
from inference.protocol.openai.responses_stored import (
    DeletedResponse,
    InputItemList,
    InputItemsQuery,
)
from inference.serving.context import RequestContext
from inference.serving.pipeline import answer
from inference.serving.responses.retrieve import (
    delete_response,
    get_response,
    list_input_items,
)
from inference.serving.sse import EventStream


@endpoint(
    "POST",
    body=ResponseRequest,
    auth=API_KEY,
    dialect=RESPONSES,
    record=True,
    response=ResponseObject,
    stream=ResponseLifecycleEvent,
)
async def create_response(
    request: HttpRequest, ctx: RequestContext, body: ResponseRequest
) -> ResponseObject | EventStream:
    return await answer(RESPONSES, body, ctx)


@endpoint(
    "GET",
    "DELETE",
    auth=API_KEY,
    dialect=RESPONSES,
    response={"GET": ResponseObject, "DELETE": DeletedResponse},
)
async def response_detail(
    request: HttpRequest, ctx: RequestContext, response_id: str
) -> ResponseObject | DeletedResponse:
    if request.method == "DELETE":
        return await delete_response(ctx.caller, response_id)
    return await get_response(ctx.caller, response_id)


@endpoint("GET", auth=API_KEY, dialect=RESPONSES, response=InputItemList, query=InputItemsQuery)
async def response_input_items(
    request: HttpRequest, ctx: RequestContext, response_id: str
) -> InputItemList:
    return await list_input_items(ctx.caller, response_id, request.GET)
