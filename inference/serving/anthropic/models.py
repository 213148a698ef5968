"""GET /v1/models and /v1/models/{id} in Anthropic's shape, for a client that sends
anthropic-version: serving's listing (models.py) with display names and first/last ids."""

from __future__ import annotations

from datetime import UTC

from apikeys.auth import Caller
from inference.protocol.anthropic.models import AnthropicModel, AnthropicModelList
from inference.serving.models import Listed, find_listed, listed


def anthropic_model(name: Listed) -> AnthropicModel:
    entry = name.entry
    return AnthropicModel(
        id=name.id,
        display_name=entry.display_name or entry.public_id,
        created_at=entry.created.astimezone(UTC).isoformat().replace("+00:00", "Z"),
    )


async def list_anthropic_models(caller: Caller) -> AnthropicModelList:
    data = [anthropic_model(name) for name in await listed(caller)]
    return AnthropicModelList(
        data=data, first_id=data[0].id if data else None, last_id=data[-1].id if data else None
    )


async def retrieve_anthropic_model(model_id: str, caller: Caller) -> AnthropicModel:
    return anthropic_model(await find_listed(model_id, caller))
