"""A catalog model: a model this server may serve, how it is loaded and what requests get by
default. Its choices are in `choices`, its long help texts in `catalog_help`, what clean()
refuses in `checks`."""

from __future__ import annotations

from pathlib import Path

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from catalog.aliases import validate_alias_list
from catalog.model_config import read_config
from catalog.models import catalog_help as HELP
from catalog.models.checks import check_aliases, check_context_fits, check_entry
from catalog.models.choices import ContextOverflow, Parallel, Pooling, Purpose, Source
from catalog.models.prompting import ModelFamily
from catalog.validators import public_id_validator
from inference.engine.drafting import DRAFTERS, MAX_DRAFT_TOKENS
from inference.engine.formats import ACTIVATION_ROUNDINGS, COMPUTE_FORMATS, KV_CACHE_FORMATS
from inference.engine.types import ModelSpec


class CatalogModel(models.Model):
    """A model this server may serve, under the id clients send as `model`."""

    # What spec() and family detection read besides the row: fetched with it where an async
    # request reads the row (a lazy read there would be a query from the event loop).
    RELATED = ("family", "base_model", "base_model__family", "draft_model")

    Source = Source
    Purpose = Purpose
    Pooling = Pooling
    Parallel = Parallel
    ContextOverflow = ContextOverflow

    public_id = models.CharField(
        "model id", max_length=128, unique=True, validators=[public_id_validator]
    )
    aliases = models.JSONField(
        default=list, blank=True, validators=[validate_alias_list], help_text=HELP.ALIASES
    )
    default_for_unknown_ids = models.BooleanField(
        "default for unknown ids", default=False, help_text=HELP.DEFAULT_FOR_UNKNOWN_IDS
    )
    display_name = models.CharField(max_length=200, blank=True)
    purpose = models.CharField(
        max_length=9, choices=Purpose.choices, default=Purpose.CHAT, help_text=HELP.PURPOSE
    )
    vision = models.BooleanField("reads images", default=False, help_text=HELP.VISION)
    pooling = models.CharField(
        max_length=4,
        choices=Pooling.choices,
        default=Pooling.AUTO,
        help_text="Embedding models: how token states become one vector.",
    )
    normalize = models.BooleanField(
        default=True, help_text="Embedding models: return unit-length vectors."
    )
    query_prefix = models.CharField(max_length=500, blank=True, help_text=HELP.QUERY_PREFIX)
    document_prefix = models.CharField(max_length=500, blank=True, help_text=HELP.DOCUMENT_PREFIX)
    max_input_tokens = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)], help_text=HELP.MAX_INPUT_TOKENS
    )
    truncate_inputs = models.BooleanField(
        default=False,
        help_text="Embedding models: cut longer inputs to the limit instead of refusing them.",
    )
    source = models.CharField(max_length=8, choices=Source.choices, default=Source.LOCAL)
    location = models.CharField(max_length=1024, help_text=HELP.LOCATION)
    base_model = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="adapters",
        help_text=HELP.BASE_MODEL,
    )
    family = models.ForeignKey(
        ModelFamily, null=True, blank=True, on_delete=models.SET_NULL, help_text=HELP.FAMILY
    )
    enabled = models.BooleanField(default=True)
    preload = models.BooleanField("preload on start", default=False)
    compute_format = models.CharField(
        max_length=10,
        choices=[(c, c) for c in COMPUTE_FORMATS],
        default="auto",
        help_text=HELP.COMPUTE_FORMAT,
    )
    activations = models.CharField(
        "activation rounding",
        max_length=6,
        choices=[(c, c) for c in ACTIVATION_ROUNDINGS],
        default="15bit",
        help_text=HELP.ACTIVATIONS,
    )
    kv_cache = models.CharField(
        "KV cache",
        max_length=8,
        choices=[(c, c) for c in KV_CACHE_FORMATS],
        default="auto",
        help_text=HELP.KV_CACHE,
    )
    pinned = models.BooleanField(
        default=False, help_text="Never unloaded to make room for other models, nor when idle."
    )
    parallel = models.CharField(
        "split over the group",
        max_length=8,
        choices=Parallel.choices,
        blank=True,
        default=Parallel.NONE,
        help_text=HELP.PARALLEL,
    )
    default_max_tokens = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)], help_text=HELP.DEFAULT_MAX_TOKENS
    )
    max_output_tokens = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Largest max_tokens a request may ask for (empty: up to the context length).",
    )
    default_temperature = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.0), MaxValueValidator(2.0)]
    )
    default_top_p = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)]
    )
    speculative = models.CharField(
        "speculative decoding",
        max_length=16,
        choices=[("off", "off"), *((d, d) for d in DRAFTERS)],
        default="off",
        help_text=HELP.SPECULATIVE,
    )
    draft_model = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="drafts_for",
        limit_choices_to={"purpose": "chat", "vision": False},
        help_text=HELP.DRAFT_MODEL,
    )
    draft_tokens = models.PositiveSmallIntegerField(
        default=4,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_DRAFT_TOKENS)],
        help_text=HELP.DRAFT_TOKENS,
    )
    system_prompt = models.TextField(
        blank=True, help_text="Used when a request brings no system message."
    )
    context_length = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)], help_text=HELP.CONTEXT_LENGTH
    )
    context_overflow = models.CharField(
        "prompts over the context",
        max_length=16,
        choices=ContextOverflow.choices,
        default=ContextOverflow.ERROR,
        help_text=HELP.CONTEXT_OVERFLOW,
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)
    last_used = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["public_id"]
        verbose_name = "catalog model"
        # What a staff member may do beyond editing rows (a superuser may do everything; the
        # admin token too). Keys are managed with apikeys' own add/change/delete permissions.
        permissions = [
            ("operate_pool", "Can warm and unload models (admin actions, /control)"),
            ("use_playground", "Can chat with any enabled model in the playground"),
            ("import_models", "Can import models (GGUF imports, hub pulls)"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["purpose"],
                condition=models.Q(default_for_unknown_ids=True, enabled=True),
                name="one_default_model_per_purpose",
                violation_error_message="Another enabled model of this purpose is already the "
                "default for unknown ids.",
            )
        ]

    def __str__(self) -> str:
        return self.public_id

    def spec(self) -> ModelSpec:
        """What the engine needs to load this model."""
        if self.source == self.Source.LORA and self.base_model is not None:
            return self.adapter_spec()
        return ModelSpec(
            model_id=self.public_id,
            location=self.location,
            from_hub=self.source == self.Source.HUGGING_FACE,
            context_length=self.context_length,
            pinned=self.pinned,
            compute_format=self.compute_format,
            kv_cache=self.kv_cache,
            activations=self.activations,
            purpose=self.purpose,
            vision=self.vision and self.purpose == self.Purpose.CHAT,
            pooling=self.pooling,
            normalize=self.normalize,
            parallel=self.parallel,
            draft=self.draft_model.spec() if self.draft_model_id else None,
        )

    def adapter_spec(self) -> ModelSpec:
        """An adapter computes as its base does (same format, context, KV cache): it is the
        base's weights with its LoRA layers over them."""
        base = self.base_model.spec()
        return ModelSpec(
            model_id=self.public_id,
            location=self.location,
            context_length=self.context_length or base.context_length,
            pinned=self.pinned,
            compute_format=base.compute_format,
            kv_cache=base.kv_cache,
            activations=base.activations,
            base=base,
        )

    def capabilities(self) -> list[str]:
        """What /v1/models tells clients this model does (Ollama's words for them)."""
        if self.purpose == self.Purpose.EMBEDDING:
            return ["embedding"]
        if self.purpose == self.Purpose.RERANK:
            return ["rerank"]
        return ["completion", "vision"] if self.vision else ["completion"]

    def clean(self) -> None:
        super().clean()
        check_entry(self)

    def clean_context_fits(self) -> None:
        """The context within the model's own; the admin's form asks (checks.py says why
        clean() does not)."""
        check_context_fits(self)

    def clean_aliases(self) -> None:
        """No id or alias this one claims is another model's (a pull checks before it runs)."""
        check_aliases(self)

    def own_config(self) -> dict | None:
        """The model's config.json (a LoRA adapter's: its base's); None for a hub repo (not
        read from here) or where there is none to read."""
        model = self.base_model if self.source == self.Source.LORA else self
        if model is None or model.source == self.Source.HUGGING_FACE:
            return None
        return read_config(Path(model.location))
