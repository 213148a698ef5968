"""One line of a batch run through the same serving code as its HTTP endpoint: its body parsed
by the endpoint's own request model, answered by the endpoint's serving function (stream
forced off), as the batch's owner (the key's model list applies), at batch priority (the
engine serves interactive requests first). The answer, or the endpoint's error body, is the
line's outcome; the engine's queue being full, or the server going away, is not an outcome:
the line is tried again (Retry), or left for the next start (Interrupted)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from apikeys.auth import Caller
from inference.edge.body import validation_error
from inference.edge.dialects import ANTHROPIC, OPENAI, RESPONSES, Dialect
from inference.engine.types import BATCH
from inference.protocol.anthropic.requests import MessagesRequest
from inference.protocol.errors import APIError, server_error
from inference.protocol.openai.chat import ChatCompletionRequest
from inference.protocol.openai.completions import CompletionRequest
from inference.protocol.openai.embeddings import EmbeddingRequest
from inference.protocol.openai.responses_request import ResponseRequest
from inference.serving.context import RequestContext
from inference.serving.openai.embeddings import answer_embeddings
from inference.serving.pipeline import answer

log = logging.getLogger(__name__)
# The engine's codes (serving/errors.py) that say nothing of the line itself.
INTERRUPTIONS = ("shutting_down", "engine_restarted", "engine_unavailable")


class Retry(Exception):
    """The engine's queue is full: wait and run the line again."""

    def __init__(self, after: float) -> None:
        super().__init__(after)
        self.after = after


class Interrupted(Exception):
    """The server is shutting down or its engine is gone: the line stays to be done.
    `refused`: the drain turned it away before it reached the engine (it never ran)."""

    def __init__(self, message: str, refused: bool) -> None:
        super().__init__(message)
        self.refused = refused


@dataclass(frozen=True)
class Route:
    model: type[BaseModel]
    dialect: Dialect
    serve: Callable[[Any, RequestContext], Awaitable[BaseModel]]


def _generate(dialect: Dialect) -> Callable[[Any, RequestContext], Awaitable[BaseModel]]:
    async def serve(body: Any, ctx: RequestContext) -> BaseModel:
        return await answer(dialect, body, ctx)  # type: ignore[return-value]

    return serve


ROUTES = {
    "/v1/chat/completions": Route(ChatCompletionRequest, OPENAI, _generate(OPENAI)),
    "/v1/completions": Route(CompletionRequest, OPENAI, _generate(OPENAI)),
    "/v1/embeddings": Route(EmbeddingRequest, OPENAI, answer_embeddings),
    "/v1/responses": Route(ResponseRequest, RESPONSES, _generate(RESPONSES)),
    "/v1/messages": Route(MessagesRequest, ANTHROPIC, _generate(ANTHROPIC)),
}


@dataclass(frozen=True)
class Outcome:
    status_code: int
    body: dict
    request_id: str

    @property
    def succeeded(self) -> bool:
        return self.status_code < 400


def parse(route: Route, body: dict) -> BaseModel:
    try:
        parsed = route.model.model_validate(body)
    except ValidationError as exc:
        raise validation_error(exc) from None
    if "stream" in type(parsed).model_fields:
        parsed = parsed.model_copy(update={"stream": False})
    return parsed


async def run_line(url: str, body: dict, caller: Caller) -> Outcome:
    route = ROUTES[url]
    ctx = RequestContext(url, caller=caller, priority=BATCH)  # below interactive work
    try:
        result = await route.serve(parse(route, body), ctx)
        return Outcome(200, result.model_dump(mode="json"), ctx.id)
    except APIError as exc:
        if exc.status == 429 and exc.code == "queue_full":
            raise Retry(float(exc.headers.get("Retry-After", 1))) from None
        if exc.status == 503 and exc.code in INTERRUPTIONS:
            raise Interrupted(exc.message, refused=exc.code == "shutting_down") from None
        return Outcome(exc.status, route.dialect.error_body(exc).model_dump(mode="json"), ctx.id)
    except Exception:
        log.exception("batch line failed (%s)", url)
        return Outcome(
            500, route.dialect.error_body(server_error()).model_dump(mode="json"), ctx.id
        )
    finally:
        ctx.close()
