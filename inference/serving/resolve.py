"""From the `model` a client sent to what the engine loads. Only enabled catalog rows resolve."""

from __future__ import annotations

from dataclasses import dataclass

from apikeys.auth import Caller
from catalog.families import detect_family
from catalog.last_used import touch_last_used
from catalog.models import CatalogModel, ModelFamily
from inference.adapters import FamilyAdapter, FamilyProfile, get_adapter
from inference.engine.types import ModelSpec
from inference.protocol.errors import APIError, model_not_found


@dataclass(frozen=True)
class ResolvedModel:
    entry: CatalogModel
    spec: ModelSpec
    adapter: FamilyAdapter


async def resolve_model(model_id: str, caller: Caller, purpose: str = "chat") -> ResolvedModel:
    """The enabled catalog entry `model_id` names, for an endpoint that needs a model made for
    `purpose` ("chat": every generation endpoint; "embedding": /v1/embeddings)."""
    # The id is only ever a key into the catalog: never a path or a repo to fetch. A model
    # the caller's key may not use is reported exactly like one that does not exist.
    if not caller.may_use(model_id):
        raise model_not_found(model_id)
    try:
        entry = await CatalogModel.objects.select_related("family").aget(
            public_id=model_id, enabled=True
        )
    except CatalogModel.DoesNotExist:
        raise model_not_found(model_id) from None
    check_purpose(entry, purpose)
    await touch_last_used(entry)
    # Read on every request: family edits in admin apply at once, no restart.
    families = [f async for f in ModelFamily.objects.all()]
    family = detect_family(entry, families)
    profile = family.profile() if family else FamilyProfile()
    return ResolvedModel(entry, entry.spec(), get_adapter(profile))


def check_purpose(entry: CatalogModel, purpose: str) -> None:
    """A 400 naming `model` when it is made for something else than the endpoint does."""
    if entry.purpose == purpose:
        return
    if purpose == "embedding":
        message = (
            f"The model '{entry.public_id}' is a chat model; /v1/embeddings needs an embedding "
            "model (see /v1/models: capabilities)."
        )
    else:
        message = (
            f"The model '{entry.public_id}' is an embedding model; it serves /v1/embeddings "
            "only, not text generation."
        )
    raise APIError(message, param="model", code="model_not_supported")
