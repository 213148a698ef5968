"""Server-sent events: the lines a stream is made of, and the stream a view hands the edge."""

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from pydantic import BaseModel

DONE = "data: [DONE]\n\n"


@dataclass(frozen=True)
class EventStream:
    """SSE lines for the edge to send as a streaming response in the endpoint's dialect."""

    lines: AsyncIterator[str]


def sse_event(payload: BaseModel, exclude: set[str] | None = None) -> str:
    return f"data: {payload.model_dump_json(exclude=exclude)}\n\n"


def chunk_writer(
    payload_type: type[BaseModel], envelope: dict, include_usage: bool
) -> Callable[..., str]:
    """Builds one stream's chunks: the same id, created and model on each."""

    def chunk(choices: list, usage: BaseModel | None = None) -> str:
        payload = payload_type(**envelope, choices=choices, usage=usage)
        # With include_usage every chunk says "usage": null but the last; without, no key.
        return sse_event(payload, exclude=None if include_usage else {"usage"})

    return chunk
