"""POST /api/pull. This server does not fetch models on a client's word (its operator adds them:
manage.py add_model, import_gguf); until pulling from a hub is wired here, a pull of a model
the catalog already serves succeeds at once, as Ollama's does for a model it has, and any
other is refused with Ollama's error body."""

from __future__ import annotations

from apikeys.auth import Caller
from inference.protocol.errors import APIError
from inference.protocol.ollama.requests import PullRequest
from inference.protocol.ollama.responses import StatusResponse
from inference.serving.ollama.dialect import one_object
from inference.serving.resolve import find_model
from inference.serving.sse import EventStream


def pull_unavailable(name: str) -> APIError:
    return APIError(
        f"pull is not available on this server: '{name}' is not in its catalog, and models "
        "are added by its operator.",
        status=501,
        param="model",
        code="pull_unavailable",
    )


async def pull_model(request: PullRequest, caller: Caller) -> StatusResponse | EventStream:
    exact = await find_model(request.model, caller) or await find_model(
        request.model, caller, "embedding"
    )
    # The default for unknown ids would answer any name: only a model by its own id counts.
    if exact is None or exact.public_id != request.model:
        raise pull_unavailable(request.name)
    status = StatusResponse(status="success")
    if not request.stream:
        return status
    return one_object(status)
