"""The enabled catalog models a caller may use, as every dialect's model listing sees them
(GET /v1/models in OpenAI's shape: openai/models.py; in Anthropic's: anthropic/models.py).

Each model is listed under its own id and again under each exact alias (with the id it is an
alias of), as vLLM lists every served name, so that clients which check an id against the list
accept it. Globs and the default for unknown ids cannot be listed: retrieving an id they match
answers for it all the same."""

from __future__ import annotations

from dataclasses import dataclass

from apikeys.auth import Caller
from catalog.aliases import is_glob
from catalog.models import CatalogModel
from inference.protocol.errors import model_not_found
from inference.serving.resolve import find_model


@dataclass(frozen=True)
class Listed:
    """One listed name: the catalog row that serves it, and the row's id when it is an alias."""

    id: str
    entry: CatalogModel
    alias_of: str | None = None


def listed_as(entry: CatalogModel, model_id: str | None = None) -> Listed:
    """The entry as `model_id` names it: its own id, or one of its aliases."""
    if model_id is None or model_id == entry.public_id:
        return Listed(entry.public_id, entry)
    return Listed(model_id, entry, alias_of=entry.public_id)


async def listed(caller: Caller) -> list[Listed]:
    """Every name the caller may see, each with the catalog row that serves it."""
    names = []
    async for entry in CatalogModel.objects.filter(enabled=True):
        if caller.may_use(entry.public_id):
            names.append(listed_as(entry))
            names += [listed_as(entry, a) for a in entry.aliases if not is_glob(a)]
    return names


async def find_listed(model_id: str, caller: Caller) -> Listed:
    """What `model_id` names, as the listing would show it; a 404 when nothing serves it."""
    entry = None
    for purpose in ("chat", "embedding", "rerank"):  # an unknown id: each purpose's default
        entry = entry or await find_model(model_id, caller, purpose)
    if entry is None:
        raise model_not_found(model_id)
    return listed_as(entry, model_id)
