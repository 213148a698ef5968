"""GET /v1/models and /v1/models/{id}: the enabled catalog models a caller may use, in OpenAI's
shape or, for a client that sends anthropic-version, in Anthropic's.

Each model's entry lists its aliases; each exact alias is listed again as an entry of its own
(with alias_of), as vLLM lists every served name, so that clients which check an id against
the list accept it. Globs and the default for unknown ids cannot be listed: retrieving an id
they match answers for it all the same."""

from __future__ import annotations

from datetime import UTC

from apikeys.auth import Caller
from catalog.aliases import is_glob
from catalog.models import CatalogModel
from inference.protocol.anthropic.models import AnthropicModel, AnthropicModelList
from inference.protocol.errors import model_not_found
from inference.protocol.openai.models import ModelCard, ModelList
from inference.serving.resolve import find_model


def model_card(entry: CatalogModel, model_id: str | None = None) -> ModelCard:
    """The entry as `model_id` names it: its own id, or one of its aliases."""
    own = model_id in (None, entry.public_id)
    return ModelCard(
        id=entry.public_id if own else model_id,
        created=int(entry.created.timestamp()),
        capabilities=entry.capabilities(),
        aliases=list(entry.aliases) if own else [],
        alias_of=None if own else entry.public_id,
    )


async def listed(caller: Caller) -> list[tuple[ModelCard, CatalogModel]]:
    """Every entry the caller may see, each with the catalog row that serves it."""
    cards = []
    async for entry in CatalogModel.objects.filter(enabled=True):
        if caller.may_use(entry.public_id):
            cards.append((model_card(entry), entry))
            cards += [(model_card(entry, a), entry) for a in entry.aliases if not is_glob(a)]
    return cards


def anthropic_model(card: ModelCard, entry: CatalogModel) -> AnthropicModel:
    return AnthropicModel(
        id=card.id,
        display_name=entry.display_name or entry.public_id,
        created_at=entry.created.astimezone(UTC).isoformat().replace("+00:00", "Z"),
    )


async def list_models(caller: Caller, anthropic: bool) -> ModelList | AnthropicModelList:
    cards = await listed(caller)
    if not anthropic:
        return ModelList(data=[card for card, _ in cards])
    data = [anthropic_model(card, entry) for card, entry in cards]
    return AnthropicModelList(
        data=data, first_id=data[0].id if data else None, last_id=data[-1].id if data else None
    )


async def retrieve_model(
    model_id: str, caller: Caller, anthropic: bool
) -> ModelCard | AnthropicModel:
    entry = None
    for purpose in ("chat", "embedding", "rerank"):  # an unknown id: each purpose's default
        entry = entry or await find_model(model_id, caller, purpose)
    if entry is None:
        raise model_not_found(model_id)
    card = model_card(entry, model_id)
    return anthropic_model(card, entry) if anthropic else card
