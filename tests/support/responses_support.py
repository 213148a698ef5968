"""What the Responses API tests share: requests in-process, SSE parsing, SDK validation."""

from __future__ import annotations

import json

from asgiref.sync import async_to_sync
from django.test import AsyncClient
from openai.types.responses import Response, ResponseItemList, ResponseStreamEvent
from pydantic import TypeAdapter

RESPONSES = "/v1/responses"
NO_EOS = {"2": -100}
STREAM_EVENT = TypeAdapter(ResponseStreamEvent)


def create(client, **body):
    """POSTs a response to the tiny model; body fields override the defaults."""
    payload = {"model": "tiny", "input": "Hi", "max_output_tokens": 4, "temperature": 0, **body}
    return client.post(RESPONSES, payload, content_type="application/json")


def valid_response(body: dict) -> Response:
    """The body as the official SDK reads it (fails on any shape it would not accept)."""
    return Response.model_validate(body)


def valid_item_list(body: dict) -> ResponseItemList:
    return ResponseItemList.model_validate(body)


def parse_sse(text: str) -> list[tuple[str, dict]]:
    """(event name, data) for each SSE block; checks the `event:` line names the data's type."""
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        assert lines[0].startswith("event: "), block
        assert lines[1].startswith("data: "), block
        name, data = lines[0].removeprefix("event: "), json.loads(lines[1].removeprefix("data: "))
        assert data["type"] == name
        events.append((name, data))
    return events


def stream(body: dict, headers: dict | None = None) -> tuple[int, str, list[tuple[str, dict]]]:
    """POSTs a streaming response in-process: status, content type, parsed events."""
    payload = {"model": "tiny", "input": "Hi", "stream": True, **body}

    async def go():
        response = await AsyncClient().post(
            RESPONSES, payload, content_type="application/json", headers=headers or {}
        )
        if not response.streaming:
            return response.status_code, response["Content-Type"], response.content.decode()
        chunks = [chunk async for chunk in response.streaming_content]
        return response.status_code, response["Content-Type"], b"".join(chunks).decode()

    status, content_type, text = async_to_sync(go)()
    if content_type != "text/event-stream":
        return status, content_type, [("json", json.loads(text))]
    return status, content_type, parse_sse(text)


def check_stream_events(events: list[tuple[str, dict]]) -> None:
    """Every event is one of the SDK's, numbered 0, 1, 2... in order."""
    for number, (_, data) in enumerate(events):
        STREAM_EVENT.validate_python(data)
        assert data["sequence_number"] == number
