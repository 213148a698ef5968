"""From the `model` a client sent to what the engine loads. Only enabled catalog rows resolve:
the model whose id it is, else the one with that exact alias, else the one whose glob alias
matches it with the most literal characters (catalog/aliases.py), else the model ticked as the
default for unknown ids of the endpoint's purpose. Replies name the id the client sent."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from apikeys.auth import Caller
from catalog.aliases import best_match
from catalog.families import detect_family
from catalog.last_used import touch_last_used
from catalog.models import CatalogModel, ModelFamily
from inference.adapters import FamilyAdapter, FamilyProfile, get_adapter
from inference.engine.types import ModelSpec
from inference.protocol.errors import APIError, model_not_found
from inference.serving.metadata import metadata_patterns, without_metadata
from inference.serving.prompts import ChatPrompt


@dataclass(frozen=True)
class ResolvedModel:
    entry: CatalogModel
    spec: ModelSpec
    adapter: FamilyAdapter
    metadata: tuple[re.Pattern, ...] = ()  # system lines kept out of prompts (metadata.py)

    def chat_prompt(self, prompt: ChatPrompt) -> ChatPrompt:
        """The prompt every dialect hands the engine: per-request metadata left out, under
        this model's policy for prompts over its context."""
        messages = without_metadata(prompt.messages, self.metadata)
        return replace(prompt, messages=messages, overflow=self.entry.context_overflow)


async def resolve_model(model_id: str, caller: Caller, purpose: str = "chat") -> ResolvedModel:
    """The enabled catalog entry `model_id` names, for an endpoint that needs a model made for
    `purpose` ("chat": every generation endpoint; "embedding": /v1/embeddings)."""
    entry = await find_model(model_id, caller, purpose)
    if entry is None:
        raise model_not_found(model_id)
    check_purpose(entry, purpose)
    await touch_last_used(entry)
    # Read on every request: family edits in admin apply at once, no restart.
    families = [f async for f in ModelFamily.objects.all()]
    family = detect_family(entry, families)
    profile = family.profile() if family else FamilyProfile()
    metadata = await metadata_patterns() if purpose == "chat" else ()
    return ResolvedModel(entry, entry.spec(), get_adapter(profile), metadata)


async def find_model(model_id: str, caller: Caller, purpose: str = "chat") -> CatalogModel | None:
    """The enabled catalog row `model_id` names, or None. The id is only ever a key into the
    catalog: never a path or a repo to fetch. A key's model list holds public ids, and applies
    to the model an alias or the default leads to: a model the key may not use is reported
    exactly like one that does not exist."""
    enabled = CatalogModel.objects.select_related(*CatalogModel.RELATED).filter(enabled=True)
    entry = await enabled.filter(public_id=model_id).afirst()
    if entry is None:
        entry = best_match(model_id, [e async for e in enabled.exclude(aliases=[])])
    if entry is None:
        entry = await enabled.filter(default_for_unknown_ids=True, purpose=purpose).afirst()
    if entry is None or not caller.may_use(entry.public_id):
        return None
    return entry


def check_purpose(entry: CatalogModel, purpose: str) -> None:
    """A 400 naming `model` when it is made for something else than the endpoint does."""
    if entry.purpose == purpose:
        return
    serves = {
        "chat": "text generation (/v1/chat/completions)",
        "embedding": "/v1/embeddings",
        "rerank": "/v1/rerank",
    }
    message = (
        f"The model '{entry.public_id}' is a{'n' if entry.purpose == 'embedding' else ''} "
        f"{entry.purpose} model; it serves {serves[entry.purpose]} only, not "
        f"{serves[purpose]} (see /v1/models: capabilities)."
    )
    raise APIError(message, param="model", code="model_not_supported")
