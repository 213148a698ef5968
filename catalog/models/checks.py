"""What a catalog model's clean() refuses, one function per concern, each raising Django's
ValidationError on the field at fault: the setting combinations the engine cannot serve, the
location and its files, the model's own config, and ids that two models would both claim."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from django.core.exceptions import ValidationError

from catalog.aliases import alias_conflicts
from catalog.model_config import own_context
from catalog.models.choices import Purpose, Source
from catalog.validators import validate_adapter_dir, validate_hf_repo, validate_model_dir
from inference.engine.formats import activations_refusal, kv_refusal
from inference.engine.mtp.files import missing_heads
from inference.engine.vocabulary import chunk_context_limit


class CatalogEntry(Protocol):
    """What the checks read of a CatalogModel (named so, not imported: it imports them)."""

    pk: int | None
    source: str
    location: str
    purpose: str
    vision: bool
    compute_format: str
    activations: str
    kv_cache: str
    context_length: int | None
    max_output_tokens: int | None
    default_max_tokens: int | None
    speculative: str
    base_model_id: int | None
    base_model: CatalogEntry | None
    draft_model_id: int | None
    draft_model: CatalogEntry | None
    aliases: object  # a list of ids when valid; the field's own validator says otherwise

    def own_config(self) -> dict | None: ...


def check_entry(entry: CatalogEntry) -> None:
    """Everything CatalogModel.clean() checks beyond the fields' own validators."""
    if entry.vision and entry.purpose != Purpose.CHAT:
        raise ValidationError({"vision": "Only chat models read images."})
    refusal = activations_refusal(entry.compute_format, entry.activations)
    if refusal:
        raise ValidationError({"activations": refusal})
    if entry.activations != "15bit" and entry.purpose != Purpose.CHAT:
        raise ValidationError({"activations": "Only chat models round activations so."})
    check_limits(entry)
    check_draft(entry)
    check_mtp(entry)
    if entry.source == Source.LORA:
        check_adapter(entry)
    elif entry.base_model_id is not None:
        raise ValidationError({"base_model": "Only a LoRA adapter has a base model."})
    else:
        check_location(entry)
        check_against_config(entry)
    check_aliases(entry)


def check_location(entry: CatalogEntry) -> None:
    """A hub repo's name, or a folder with a model in it."""
    validate = validate_hf_repo if entry.source == Source.HUGGING_FACE else validate_model_dir
    try:
        validate(entry.location)
    except ValidationError as exc:
        raise ValidationError({"location": exc.messages}) from exc


def check_against_config(entry: CatalogEntry) -> None:
    """What the model's config says the engine cannot do is refused here, with the reason,
    rather than when the model loads (a hub repo not yet pulled is checked then): a
    quantized KV cache it cannot keep, a context past Llama 4's first attention chunk."""
    config = entry.own_config()
    if config is None:
        return
    reason = kv_refusal(config, entry.kv_cache)
    if reason:
        raise ValidationError({"kv_cache": reason})
    chunk = chunk_context_limit(config)
    if chunk and entry.context_length and entry.context_length > chunk:
        why = f"Llama 4 is served within its first attention chunk: at most {chunk} tokens."
        raise ValidationError({"context_length": why})


def check_context_fits(entry: CatalogEntry) -> None:
    """A context longer than the model's own (its config's trained positions) is refused,
    with that limit. The admin's form checks it; add_model --context-length may still go
    past, as the engine runs on past the trained positions (tests of long streams on the
    512-token tiny model rely on that)."""
    config = entry.own_config()
    limit = own_context(config) if config is not None else None
    if limit and entry.context_length and entry.context_length > limit:
        raise ValidationError(
            {
                "context_length": f"At most {limit} tokens: the model's own context (its "
                f"config.json). Leave it blank for {limit}, or give a shorter one."
            }
        )


def check_limits(entry: CatalogEntry) -> None:
    """The default max_tokens is within the max output tokens (serving would cut it to
    them silently)."""
    most, default = entry.max_output_tokens, entry.default_max_tokens
    if most and default and default > most:
        raise ValidationError(
            {
                "default_max_tokens": f"{default} is more than the max output tokens "
                f"({most}): requests that leave max_tokens out would be cut to {most} "
                "anyway. Give at most that, or raise the max output tokens."
            }
        )


def check_mtp(entry: CatalogEntry) -> None:
    """`speculative: mtp` only for a model whose files ship an MTP head (a hub model's
    files are not here yet: its load says whether it has one)."""
    if entry.speculative != "mtp":
        return
    if entry.purpose != Purpose.CHAT or entry.vision or entry.source == Source.LORA:
        raise ValidationError({"speculative": "Only text chat models draft with an MTP head."})
    if entry.source != Source.HUGGING_FACE:
        missing = missing_heads(Path(entry.location))
        if missing:
            raise ValidationError({"speculative": f"No MTP head here: {missing}."})


def check_draft(entry: CatalogEntry) -> None:
    draft = entry.draft_model if entry.draft_model_id else None
    if draft is None:
        if entry.speculative == "draft_model":
            raise ValidationError({"speculative": "Choose a draft model first."})
        return
    if entry.purpose != Purpose.CHAT or entry.vision or entry.source == Source.LORA:
        raise ValidationError(
            {"draft_model": "Only text chat models (not LoRA adapters) take a draft model."}
        )
    if draft.source == Source.LORA:
        raise ValidationError({"draft_model": "A LoRA adapter cannot be a draft model."})
    if draft.pk == entry.pk or draft.draft_model_id:
        raise ValidationError(
            {"draft_model": "A draft model must be another model without a draft of its own."}
        )


def check_adapter(entry: CatalogEntry) -> None:
    try:
        validate_adapter_dir(entry.location)
    except ValidationError as exc:
        raise ValidationError({"location": exc.messages}) from exc
    base = entry.base_model
    if base is None:
        raise ValidationError({"base_model": "A LoRA adapter needs its base model."})
    if base.source == Source.LORA or base.purpose != Purpose.CHAT or base.vision:
        raise ValidationError(
            {"base_model": "The base must be a text chat model, not an adapter itself."}
        )
    if entry.purpose != Purpose.CHAT or entry.vision:
        raise ValidationError({"purpose": "A LoRA adapter is a text chat model."})


def check_aliases(entry: CatalogEntry) -> None:
    """No id or exact alias names two models; no two globs tie (catalog/aliases.py)."""
    if not isinstance(entry.aliases, list):  # the field's own validator reports it
        return
    others = type(entry).objects.exclude(pk=entry.pk).only("public_id", "aliases")
    problems = alias_conflicts(entry, others)
    if problems:
        raise ValidationError({"aliases": problems})
