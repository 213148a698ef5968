"""From the `model` a client sent to what the engine loads. Only enabled catalog rows resolve:
the model whose id it is, else the one with that exact alias (Ollama's `x` and `x:latest` are
one name), else the one whose glob alias matches it with the most literal characters
(catalog/aliases.py), else the model ticked as the default for unknown ids of the endpoint's
purpose. Replies name the id the client sent. A key refused a model it names is told so."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from django.db.models import QuerySet

from apikeys.auth import Caller
from catalog.aliases import named_by, same_names
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
    to the model an id or alias names: naming one the key may not use is refused as such
    (key_refused), never answered as a typo; an unknown id the default would take is only
    "not found" for a key that may not use the default."""
    enabled = CatalogModel.objects.select_related(*CatalogModel.RELATED).filter(enabled=True)
    entry = await named_model(model_id, enabled)
    if entry is not None:
        if not caller.may_use(entry.public_id):
            raise key_refused(model_id, caller)
        return entry
    entry = await enabled.filter(default_for_unknown_ids=True, purpose=purpose).afirst()
    if entry is None or not caller.may_use(entry.public_id):
        return None
    return entry


async def named_model(model_id: str, rows: QuerySet[CatalogModel]) -> CatalogModel | None:
    """The row of `rows` that `model_id` names by id or alias, as catalog/aliases.named_by
    decides it (Ollama's `:latest` twin included); the aliased rows are read only when no
    row has the id itself."""
    own = [entry async for entry in rows.filter(public_id__in=same_names(model_id))]
    if own:
        return named_by(model_id, own)
    return named_by(model_id, [entry async for entry in rows.exclude(aliases=[])])


def key_refused(model_id: str, caller: Caller) -> APIError:
    """A model that exists but is not on the key's list, worded as OpenAI words a project's
    refusal ("Project `p` does not have access to model `m`": 403, code model_not_found), so
    that it never reads like a typo. Anthropic's dialect makes a 403 its permission_error."""
    return APIError(
        f"The API key `{caller.name}` does not have access to model `{model_id}`: the "
        "server's operator chose the models this key may use (GET /v1/models lists them).",
        status=403,
        param="model",
        code="model_not_found",
    )


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
