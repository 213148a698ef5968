"""GET /v1/models and /v1/models/{id} in OpenAI's shape: serving's listing (models.py) as
model cards, each alias's card naming the id it is an alias of."""

from __future__ import annotations

from apikeys.auth import Caller
from inference.protocol.openai.models import ModelCard, ModelList
from inference.serving.models import Listed, find_listed, listed


def model_card(name: Listed) -> ModelCard:
    entry = name.entry
    own = name.alias_of is None
    return ModelCard(
        id=name.id,
        created=int(entry.created.timestamp()),
        capabilities=entry.capabilities(),
        aliases=list(entry.aliases) if own else [],
        alias_of=name.alias_of,
    )


async def list_openai_models(caller: Caller) -> ModelList:
    return ModelList(data=[model_card(name) for name in await listed(caller)])


async def retrieve_openai_model(model_id: str, caller: Caller) -> ModelCard:
    return model_card(await find_listed(model_id, caller))
