from __future__ import annotations

import re
from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.timezone import now

from catalog.aliases import alias_conflicts, validate_alias_list
from catalog.model_config import own_context, read_config
from catalog.processes import LOST, process_alive
from catalog.validators import (
    public_id_validator,
    validate_adapter_dir,
    validate_hf_repo,
    validate_model_dir,
    validate_regex_list,
    validate_string_list,
)
from inference.adapters import FamilyProfile, adapter_choices
from inference.adapters.toolcalls import syntax_choices
from inference.engine.drafting import DRAFTERS, MAX_DRAFT_TOKENS
from inference.engine.formats import (
    ACTIVATION_ROUNDINGS,
    COMPUTE_FORMATS,
    KV_CACHE_FORMATS,
    activations_refusal,
    kv_refusal,
)
from inference.engine.mtp.files import missing_heads
from inference.engine.types import ModelSpec
from inference.engine.vocabulary import chunk_context_limit


class ModelFamily(models.Model):
    """How a family of models is prompted and stopped; picked per model or detected."""

    slug = models.SlugField(
        unique=True,
        help_text="The family's short name, as commands take it (import_gguf --family qwen3).",
    )
    name = models.CharField(max_length=100, help_text="The family's name as the admin lists it.")
    adapter = models.CharField(
        "prompt adapter",
        max_length=32,
        choices=adapter_choices,
        default="default",
        help_text="The code that turns a request into this family's prompt and reads its "
        "replies (roles, tool calls, reasoning): ChatML, Llama 3, Mistral, Gemma, Harmony "
        "(gpt-oss), or default (the chat template alone). Not a LoRA adapter: those are "
        "catalog models of source 'LoRA adapter'.",
    )
    priority = models.PositiveIntegerField(
        default=100,
        help_text="Detection tries families in ascending priority: the first whose patterns "
        "match wins.",
    )
    name_patterns = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_regex_list],
        help_text="Case-insensitive regular expressions matched against the model id and "
        "location, e.g. qwen on one line and smollm on the next.",
    )
    model_types = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_string_list],
        help_text="config.json model_type values, e.g. qwen2 on one line and qwen3 on the next.",
    )
    extra_stop_tokens = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_string_list],
        help_text="Special tokens that end generation besides the tokenizer's eos, e.g. "
        "<|im_end|>.",
    )
    stop_strings = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_string_list],
        help_text="Text that ends generation (not included in the output), e.g. <|user|>.",
    )
    chat_template = models.TextField(
        blank=True, help_text="Jinja chat template overriding the tokenizer's (optional)."
    )
    reasoning_start = models.CharField(
        max_length=64,
        blank=True,
        help_text="Reasoning models: the text that opens their thinking, e.g. <think>. "
        "Empty: the family does not reason and replies are left as written.",
    )
    reasoning_end = models.CharField(
        max_length=64, blank=True, help_text="The text that closes the thinking, e.g. </think>."
    )
    reasoning_in_prompt = models.BooleanField(
        "template opens the thinking",
        default=False,
        help_text="The chat template ends the prompt inside the thinking (DeepSeek-R1, "
        "Qwen3 thinking-2507): the reply starts in it, without the opening marker.",
    )
    thinking_switch = models.CharField(
        max_length=64,
        blank=True,
        help_text="The chat-template variable that turns thinking on and off, e.g. "
        "enable_thinking (Qwen3). Empty: thinking cannot be switched off.",
    )
    tool_syntax = models.CharField(
        max_length=32,
        choices=syntax_choices,
        blank=True,
        help_text="How the family writes tool calls (what its chat template shows for a call). "
        "Empty: the adapter's own (Hermes <tool_call> for most).",
    )

    thinking_by_default = models.BooleanField(
        default=True,
        help_text="Whether it thinks when a request does not say. Off (DeepSeek V3.1, V3.2): "
        "the switch is set off unless a request asks for thinking.",
    )

    class Meta:
        ordering = ["priority", "slug"]
        verbose_name_plural = "model families"

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        super().clean()
        if bool(self.reasoning_start) != bool(self.reasoning_end):
            raise ValidationError("Give both reasoning markers, or neither.")

    def profile(self) -> FamilyProfile:
        return FamilyProfile(
            slug=self.slug,
            adapter=self.adapter,
            extra_stop_tokens=tuple(self.extra_stop_tokens),
            stop_strings=tuple(self.stop_strings),
            chat_template=self.chat_template,
            reasoning_start=self.reasoning_start,
            reasoning_end=self.reasoning_end,
            reasoning_in_prompt=self.reasoning_in_prompt,
            thinking_switch=self.thinking_switch,
            tool_syntax=self.tool_syntax,
            thinking_by_default=self.thinking_by_default,
        )

    def matches_name(self, *names: str) -> bool:
        return self.matching_pattern(*names) is not None

    def matching_pattern(self, *names: str) -> str | None:
        """The first of the name patterns that one of `names` matches."""
        return next(
            (
                pattern
                for pattern in self.name_patterns
                for name in names
                if re.search(pattern, name, re.IGNORECASE)
            ),
            None,
        )


class CatalogModel(models.Model):
    """A model this server may serve, under the id clients send as `model`."""

    # What spec() and family detection read besides the row: fetched with it where an async
    # request reads the row (a lazy read there would be a query from the event loop).
    RELATED = ("family", "base_model", "base_model__family", "draft_model")

    class Source(models.TextChoices):
        LOCAL = "local", "Local MLX directory"
        HUGGING_FACE = "hf", "Hugging Face repo"
        GGUF = "gguf", "Imported GGUF"
        LORA = "lora", "LoRA adapter over a base model"

    class Purpose(models.TextChoices):
        CHAT = "chat", "Chat and completions"
        EMBEDDING = "embedding", "Embeddings"
        RERANK = "rerank", "Reranking"

    class Pooling(models.TextChoices):
        AUTO = "auto", "auto (the model's sentence-transformers config, else last for "
        "decoders and mean for encoders)"
        LAST = "last", "last token"
        MEAN = "mean", "mean of the tokens"
        CLS = "cls", "first ([CLS]) token"

    class Parallel(models.TextChoices):
        NONE = "", "no: whole on each rank"
        TENSOR = "tensor", "tensor parallel"
        PIPELINE = "pipeline", "pipeline parallel"

    class ContextOverflow(models.TextChoices):
        ERROR = "error", "refuse it (context_length_exceeded / prompt is too long)"
        TRUNCATE_MIDDLE = "truncate_middle", "drop the oldest turns, keep system and latest"

    public_id = models.CharField(
        "model id", max_length=128, unique=True, validators=[public_id_validator]
    )
    aliases = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_alias_list],
        help_text="Other ids clients may send as `model` for this one: exact ids, or globs "
        "where * is any text, e.g. claude-sonnet-4-5-20250929, claude-haiku-* or "
        "gpt-5*. The model's own id wins, then an exact alias, then the glob with the most "
        "characters besides *. Replies name the id the client sent.",
    )
    default_for_unknown_ids = models.BooleanField(
        "default for unknown ids",
        default=False,
        help_text="Serve requests for ids that name no model and match no alias (of this "
        "model's purpose). At most one enabled model per purpose. Off: such requests get 404.",
    )
    display_name = models.CharField(max_length=200, blank=True)
    purpose = models.CharField(
        max_length=9,
        choices=Purpose.choices,
        default=Purpose.CHAT,
        help_text="What clients may use it for: /v1/chat/completions, /v1/completions and "
        "/v1/messages, or /v1/embeddings, or /v1/rerank (a cross-encoder, or a decoder "
        "reranker that answers yes or no, as Qwen3-Reranker).",
    )
    vision = models.BooleanField(
        "reads images",
        default=False,
        help_text="A vision-language chat model (loaded through mlx-vlm): messages may carry "
        "images. Text-only models refuse image parts.",
    )
    pooling = models.CharField(
        max_length=4,
        choices=Pooling.choices,
        default=Pooling.AUTO,
        help_text="Embedding models: how token states become one vector.",
    )
    normalize = models.BooleanField(
        default=True, help_text="Embedding models: return unit-length vectors."
    )
    query_prefix = models.CharField(
        max_length=500,
        blank=True,
        help_text='Embedding models: text put before inputs sent with input_type "query", e.g. '
        '"Instruct: Given a web search query, retrieve relevant passages\nQuery: " '
        '(Qwen3-Embedding) or "query: " (e5).',
    )
    document_prefix = models.CharField(
        max_length=500,
        blank=True,
        help_text='Embedding models: text put before inputs sent with input_type "document", '
        'e.g. "passage: " (e5) or "search_document: " (nomic).',
    )
    max_input_tokens = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Embedding models: the longest input in tokens; reranking models: the longest "
        "query and document read together (a longer document is cut to fit). Empty: the "
        "context length.",
    )
    truncate_inputs = models.BooleanField(
        default=False,
        help_text="Embedding models: cut longer inputs to the limit instead of refusing them.",
    )
    source = models.CharField(max_length=8, choices=Source.choices, default=Source.LOCAL)
    location = models.CharField(
        max_length=1024,
        help_text="Absolute path of the MLX directory, or the Hugging Face repo id; for a LoRA "
        "adapter, its folder (adapter_config.json and adapters.safetensors, as mlx-lm's "
        "trainer writes them).",
    )
    base_model = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="adapters",
        help_text="LoRA adapters: the chat model whose weights it applies to. Both are served, "
        "under their own ids, sharing the base's weights in memory.",
    )
    family = models.ForeignKey(
        ModelFamily,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        help_text="Leave empty to detect it from the model's chat template, else its name and "
        "config.json.",
    )
    enabled = models.BooleanField(default=True)
    preload = models.BooleanField("preload on start", default=False)
    compute_format = models.CharField(
        max_length=10,
        choices=[(c, c) for c in COMPUTE_FORMATS],
        default="auto",
        help_text="auto: on a Linux CPU, the stored weights through the CPU kernels or float32 "
        "through OpenBLAS, whichever measures faster at load (float32 only when it fits the "
        "pool's budget); the stored format on a GPU.",
    )
    activations = models.CharField(
        "activation rounding",
        max_length=6,
        choices=[(c, c) for c in ACTIVATION_ROUNDINGS],
        default="15bit",
        help_text="How the CPU kernels round activations where they meet the stored 4/8-bit "
        "weights in integers (decode's few rows, and prompts on AVX-512 VNNI). 15bit: two bytes "
        "a value, within ~1e-4 of float32. 8bit: one byte, as llama.cpp's Q8 activations: half "
        "the integer products, decode ~10-17% faster at 1-2B on two cores, prompts up to 2x, "
        "next-token choices further from float32's. Refused where it cannot apply (float "
        "formats, a GPU, no kernels).",
    )
    kv_cache = models.CharField(
        "KV cache",
        max_length=8,
        choices=[(c, c) for c in KV_CACHE_FORMATS],
        default="auto",
        help_text="How the attention keys and values of prompts and answers are kept. auto: "
        "float16 on a CPU, the model's own format on a GPU. 8bit halves float16's memory "
        "(top-1 agreement with float16 in the README); 4bit quarters it, at a larger cost.",
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
        help_text="When the server runs as rank 0 of an MLX distributed group (mlx.launch): "
        "tensor splits every layer between the ranks, pipeline gives each rank a run of layers; "
        "otherwise each rank holds the whole model. Ignored outside a group.",
    )
    default_max_tokens = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="max_tokens for requests that do not say (empty: up to the max output "
        "tokens, else the room left in the context). At most the max output tokens.",
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
        help_text="The default when a request does not say (its `speculative` field). ngram: "
        "each step also checks a few tokens copied from where the latest tokens occurred "
        "earlier in the prompt or answer; answers that repeat their context (code edits, "
        "quotes) come faster. draft_model: each step checks the draft model's guesses. mtp: "
        "each step checks the guesses of the model's own multi-token-prediction head (Qwen3.5, "
        "Qwen3-Next, DeepSeek V3, GLM-4.5+, MiMo checkpoints ship one). "
        "Output is the same either way. Off: one token per step.",
    )
    draft_model = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="drafts_for",
        limit_choices_to={"purpose": "chat", "vision": False},
        help_text="A smaller chat model with the same vocabulary whose guesses "
        "`speculative: draft_model` checks. Loaded with this model (its memory counted "
        "with it) and unloaded with it.",
    )
    draft_tokens = models.PositiveSmallIntegerField(
        default=4,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_DRAFT_TOKENS)],
        help_text="Most tokens a draft proposes per step (a request's "
        "speculative.num_speculative_tokens overrides it).",
    )
    system_prompt = models.TextField(
        blank=True, help_text="Used when a request brings no system message."
    )
    context_length = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Tokens of prompt and answer together. Blank: the model's own context (its "
        "config's, shown greyed in the box). A shorter one saves memory; a longer one than "
        "the model's own is refused here, and so is 0.",
    )
    context_overflow = models.CharField(
        "prompts over the context",
        max_length=16,
        choices=ContextOverflow.choices,
        default=ContextOverflow.ERROR,
        help_text="Chat prompts longer than the context: refuse them with an error agents "
        "recognise (Claude Code then compacts), or drop whole old turns (a user message with "
        "the replies and tool results after it), then the latest turn's oldest tool "
        "exchanges, until the prompt leaves room for min(max_tokens, a quarter of the "
        "context) tokens of reply. System messages, tools, the latest user message and the "
        "last exchange are always kept; replies say how many messages were dropped.",
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

    def clean_mtp(self) -> None:
        """`speculative: mtp` only for a model whose files ship an MTP head (a hub model's
        files are not here yet: its load says whether it has one)."""
        if self.speculative != "mtp":
            return
        if self.purpose != self.Purpose.CHAT or self.vision or self.source == self.Source.LORA:
            raise ValidationError({"speculative": "Only text chat models draft with an MTP head."})
        if self.source != self.Source.HUGGING_FACE:
            missing = missing_heads(Path(self.location))
            if missing:
                raise ValidationError({"speculative": f"No MTP head here: {missing}."})

    def clean_draft(self) -> None:
        draft = self.draft_model if self.draft_model_id else None
        if draft is None:
            if self.speculative == "draft_model":
                raise ValidationError({"speculative": "Choose a draft model first."})
            return
        if self.purpose != self.Purpose.CHAT or self.vision or self.source == self.Source.LORA:
            raise ValidationError(
                {"draft_model": "Only text chat models (not LoRA adapters) take a draft model."}
            )
        if draft.source == self.Source.LORA:
            raise ValidationError({"draft_model": "A LoRA adapter cannot be a draft model."})
        if draft.pk == self.pk or draft.draft_model_id:
            raise ValidationError(
                {"draft_model": "A draft model must be another model without a draft of its own."}
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
        if self.vision and self.purpose != self.Purpose.CHAT:
            raise ValidationError({"vision": "Only chat models read images."})
        refusal = activations_refusal(self.compute_format, self.activations)
        if refusal:
            raise ValidationError({"activations": refusal})
        if self.activations != "15bit" and self.purpose != self.Purpose.CHAT:
            raise ValidationError({"activations": "Only chat models round activations so."})
        self.clean_limits()
        self.clean_draft()
        self.clean_mtp()
        if self.source == self.Source.LORA:
            self.clean_adapter()
        elif self.base_model_id is not None:
            raise ValidationError({"base_model": "Only a LoRA adapter has a base model."})
        else:
            validate = (
                validate_hf_repo if self.source == self.Source.HUGGING_FACE else validate_model_dir
            )
            try:
                validate(self.location)
            except ValidationError as exc:
                raise ValidationError({"location": exc.messages}) from exc
            self.clean_against_config()
        self.clean_aliases()

    def clean_against_config(self) -> None:
        """What the model's config says the engine cannot do is refused here, with the reason,
        rather than when the model loads (a hub repo not yet pulled is checked then): a
        quantized KV cache it cannot keep, a context past Llama 4's first attention chunk."""
        config = self.own_config()
        if config is None:
            return
        reason = kv_refusal(config, self.kv_cache)
        if reason:
            raise ValidationError({"kv_cache": reason})
        chunk = chunk_context_limit(config)
        if chunk and self.context_length and self.context_length > chunk:
            why = f"Llama 4 is served within its first attention chunk: at most {chunk} tokens."
            raise ValidationError({"context_length": why})

    def clean_context_fits(self) -> None:
        """A context longer than the model's own (its config's trained positions) is refused,
        with that limit. The admin's form checks it; add_model --context-length may still go
        past, as the engine runs on past the trained positions (tests of long streams on the
        512-token tiny model rely on that)."""
        config = self.own_config()
        limit = own_context(config) if config is not None else None
        if limit and self.context_length and self.context_length > limit:
            raise ValidationError(
                {
                    "context_length": f"At most {limit} tokens: the model's own context (its "
                    f"config.json). Leave it blank for {limit}, or give a shorter one."
                }
            )

    def own_config(self) -> dict | None:
        """The model's config.json (a LoRA adapter's: its base's); None for a hub repo (not
        read from here) or where there is none to read."""
        model = self.base_model if self.source == self.Source.LORA else self
        if model is None or model.source == self.Source.HUGGING_FACE:
            return None
        return read_config(Path(model.location))

    def clean_limits(self) -> None:
        """The default max_tokens is within the max output tokens (serving would cut it to
        them silently)."""
        most, default = self.max_output_tokens, self.default_max_tokens
        if most and default and default > most:
            raise ValidationError(
                {
                    "default_max_tokens": f"{default} is more than the max output tokens "
                    f"({most}): requests that leave max_tokens out would be cut to {most} "
                    "anyway. Give at most that, or raise the max output tokens."
                }
            )

    def clean_adapter(self) -> None:
        try:
            validate_adapter_dir(self.location)
        except ValidationError as exc:
            raise ValidationError({"location": exc.messages}) from exc
        base = self.base_model
        if base is None:
            raise ValidationError({"base_model": "A LoRA adapter needs its base model."})
        if base.source == self.Source.LORA or base.purpose != self.Purpose.CHAT or base.vision:
            raise ValidationError(
                {"base_model": "The base must be a text chat model, not an adapter itself."}
            )
        if self.purpose != self.Purpose.CHAT or self.vision:
            raise ValidationError({"purpose": "A LoRA adapter is a text chat model."})

    def clean_aliases(self) -> None:
        """No id or exact alias names two models; no two globs tie (catalog/aliases.py)."""
        if not isinstance(self.aliases, list):  # the field's own validator reports it
            return
        others = CatalogModel.objects.exclude(pk=self.pk).only("public_id", "aliases")
        problems = alias_conflicts(self, others)
        if problems:
            raise ValidationError({"aliases": problems})


class GGUFImport(models.Model):
    """A GGUF file being converted into a catalog model by a background `import_gguf`."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    class Origin(models.TextChoices):
        FILE = "file", "GGUF file"
        OLLAMA = "ollama", "Ollama"
        LMSTUDIO = "lmstudio", "LM Studio"

    class Weights(models.TextChoices):
        QUANTIZED = "quantized", "quantized"
        FLOAT16 = "float16", "float16"
        FLOAT32 = "float32", "float32"

    model_id = models.CharField("model id", max_length=128, validators=[public_id_validator])
    origin = models.CharField(
        max_length=8, choices=Origin.choices, default=Origin.FILE, editable=False
    )
    origin_name = models.CharField(
        max_length=512,
        blank=True,
        editable=False,
        help_text="The name Ollama or LM Studio lists the model under.",
    )
    source_path = models.CharField(
        max_length=1024, blank=True, help_text="A .gguf file on the server, or upload one below."
    )
    upload = models.FileField(upload_to="gguf-uploads/", blank=True)
    family = models.ForeignKey(
        ModelFamily,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        help_text="Leave empty to read it off the chat template.",
    )
    weights = models.CharField(
        max_length=9,
        choices=Weights.choices,
        default=Weights.QUANTIZED,
        help_text="Keep the weights quantized, or dequantize them once at import into float16 "
        "or float32 (a larger model).",
    )
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.QUEUED)
    progress = models.PositiveSmallIntegerField(default=0, help_text="percent")
    message = models.TextField(blank=True)
    # The import's process, so that one killed (a reboot, the OOM killer) is marked failed
    # instead of staying "running" and blocking the id (see reap_lost_imports).
    pid = models.PositiveIntegerField(null=True, blank=True, editable=False)
    imported = models.ForeignKey(
        CatalogModel, null=True, blank=True, on_delete=models.SET_NULL, editable=False
    )
    created = models.DateTimeField(auto_now_add=True)
    finished = models.DateTimeField(null=True, blank=True)

    ACTIVE = (Status.QUEUED, Status.RUNNING)

    class Meta:
        ordering = ["-created"]
        verbose_name = "GGUF import"

    def __str__(self) -> str:
        return f"{self.model_id} ({self.status})"

    @property
    def gguf_path(self) -> str:
        return self.upload.path if self.upload else self.source_path

    def discard_upload(self) -> None:
        """Deletes the uploaded file (the row keeps its name, which the list shows)."""
        if self.upload:
            self.upload.storage.delete(self.upload.name)

    @property
    def source_label(self) -> str:
        if self.origin == self.Origin.FILE:
            return self.gguf_path
        return f"{self.get_origin_display()}: {self.origin_name}"

    def clean(self) -> None:
        super().clean()
        if self.origin == self.Origin.FILE:
            self._clean_file()
        refuse_taken_id(self, "An import of this id is already running.")

    @classmethod
    def reap_lost(cls, **among: object) -> None:
        """Marks failed each active import whose process is gone, its upload deleted."""
        for job in reap_lost_jobs(cls, **among):
            job.discard_upload()

    def _clean_file(self) -> None:
        if bool(self.source_path) == bool(self.upload):
            raise ValidationError("Give either a path on the server or a file to upload.")
        if self.source_path and not Path(self.source_path).is_file():
            raise ValidationError({"source_path": "There is no such file on the server."})


def refuse_taken_id(job: GGUFImport | HubPull, running: str) -> None:
    """A ValidationError unless the job's model id is free: no catalog model has it, and no
    other job of its kind still runs for it (`running` says so; rows whose process died are
    marked failed first, so that a killed job never blocks its id)."""
    if CatalogModel.objects.filter(public_id=job.model_id).exists():
        raise ValidationError({"model_id": "The catalog already has a model with this id."})
    kind = type(job)
    kind.reap_lost(model_id=job.model_id)
    others = kind.objects.filter(model_id=job.model_id, status__in=kind.ACTIVE)
    if others.exclude(pk=job.pk).exists():
        raise ValidationError({"model_id": running})


def reap_lost_jobs(model: type[GGUFImport] | type[HubPull], **among: object) -> list:
    """An active row whose recorded process is gone was killed before it could say so: marked
    failed. Returns the rows this call marked."""
    reaped = []
    for job in model.objects.filter(status__in=model.ACTIVE, pid__isnull=False, **among):
        if process_alive(job.pid):
            continue
        marked = model.objects.filter(pk=job.pk, status__in=model.ACTIVE).update(
            status=model.Status.FAILED, message=LOST, finished=now()
        )
        if marked:
            reaped.append(job)
    return reaped


def validate_pattern(value: str) -> None:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValidationError(f"Not a regular expression: {exc}") from None


class PromptMetadataPattern(models.Model):
    """A line clients put in their system prompts that changes from request to request and
    tells the model nothing (Claude Code's billing header): left out of every prompt, so the
    prefix cache matches from the first token. Applies from the next request, no restart."""

    name = models.CharField(max_length=100)
    pattern = models.CharField(
        max_length=500,
        validators=[validate_pattern],
        help_text="A Python regular expression; each line of a system message it matches "
        "(re.search) is left out of the prompt. A message left empty is dropped.",
    )
    enabled = models.BooleanField(default=True)
    notes = models.TextField(blank=True, help_text="Who sends it, and why it may go.")

    class Meta:
        ordering = ["name"]
        verbose_name = "prompt metadata pattern"

    def __str__(self) -> str:
        return self.name


class HubPull(models.Model):
    """A Hugging Face hub repo being downloaded into the catalog by a background `pull`."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"
        CANCELLED = "cancelled"

    ACTIVE = (Status.QUEUED, Status.RUNNING)

    repo = models.CharField(
        max_length=200, validators=[validate_hf_repo], help_text="owner/name on the hub"
    )
    revision = models.CharField(max_length=200, default="main", help_text="branch, tag or commit")
    filename = models.CharField(
        "GGUF file",
        max_length=500,
        blank=True,
        help_text="For a GGUF repo: the one .gguf file to fetch and import. Empty: an MLX "
        "(safetensors) repo.",
    )
    model_id = models.CharField("model id", max_length=128, validators=[public_id_validator])
    family = models.ForeignKey(
        ModelFamily,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        help_text="Leave empty to detect it from the model's chat template.",
    )
    aliases = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_alias_list],
        help_text="Other ids the pulled model answers to (an Ollama pull adds the name its "
        "client pulled, hf.co/owner/repo:TAG).",
    )
    status = models.CharField(max_length=9, choices=Status.choices, default=Status.QUEUED)
    progress = models.PositiveSmallIntegerField(default=0, help_text="percent")
    bytes_done = models.BigIntegerField(default=0)
    bytes_total = models.BigIntegerField(default=0)
    speed = models.FloatField(default=0.0, help_text="bytes per second")
    message = models.TextField(blank=True)
    pid = models.PositiveIntegerField(null=True, blank=True, editable=False)
    imported = models.ForeignKey(
        CatalogModel, null=True, blank=True, on_delete=models.SET_NULL, editable=False
    )
    created = models.DateTimeField(auto_now_add=True)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]
        verbose_name = "hub pull"

    def __str__(self) -> str:
        return f"{self.model_id} ({self.status})"

    def clean(self) -> None:
        super().clean()
        refuse_taken_id(self, "A pull for this id is already running.")
        if isinstance(self.aliases, list):
            # Checked now, not after the download: the pull's catalog row would refuse them
            # then, with the bytes already spent.
            CatalogModel(
                public_id=self.model_id, location="-", aliases=self.aliases
            ).clean_aliases()

    @classmethod
    def reap_lost(cls, **among: object) -> None:
        """Marks failed each active pull whose process is gone."""
        reap_lost_jobs(cls, **among)
