import sys
from functools import partial

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.urls import path
from django.utils.html import format_html

from catalog.background import job_log_path, start_command
from catalog.families import choose_family, model_detection, model_folder
from catalog.forms import CatalogModelForm, PlainAdminFields
from catalog.job_admin import FailedJobs
from catalog.model_config import own_context, read_config
from catalog.models import CatalogModel, GGUFImport, ModelFamily, PromptMetadataPattern
from catalog.pool_notes import running_with, saved_note
from catalog.pool_seam import LoadedModel, LoadSettings, PoolRefused, loaded_model, pool
from catalog.source_views import sources_view


@admin.register(ModelFamily)
class ModelFamilyAdmin(PlainAdminFields, admin.ModelAdmin):
    list_display = (
        "name",
        "slug",
        "adapter",
        "tool_syntax",
        "priority",
        "extra_stop_tokens",
        "reasoning_start",
    )
    list_editable = ("priority",)
    search_fields = ("name", "slug")
    prepopulated_fields = {"slug": ("name",)}
    fieldsets = (
        (None, {"fields": ("name", "slug", "adapter", "tool_syntax", "priority")}),
        (
            "Detection",
            {
                "fields": ("name_patterns", "model_types"),
                "description": "A model whose catalog entry names no family is first known by "
                "its own chat template (inference/adapters/detect.py); these are the fallback "
                "for models whose template tells nothing, and for hub repos not yet fetched.",
            },
        ),
        ("Prompt and stops", {"fields": ("chat_template", "extra_stop_tokens", "stop_strings")}),
        (
            "Reasoning",
            {
                "fields": (
                    "reasoning_start",
                    "reasoning_end",
                    "reasoning_in_prompt",
                    "thinking_switch",
                    "thinking_by_default",
                ),
                "description": "For models that think before they answer: their thinking is "
                "split out of the reply (reasoning_content, thinking blocks, reasoning items).",
            },
        ),
    )


@admin.register(PromptMetadataPattern)
class PromptMetadataPatternAdmin(admin.ModelAdmin):
    """Per-request lines (Claude Code's billing header) kept out of every prompt, so that
    agents' turns share their prefix in the cache."""

    list_display = ("name", "pattern", "enabled")
    list_editable = ("enabled",)
    search_fields = ("name", "pattern")


@admin.register(CatalogModel)
class CatalogModelAdmin(PlainAdminFields, admin.ModelAdmin):
    list_display = (
        "public_id",
        "answers_to",
        "display_name",
        "source",
        "purpose",
        "family",
        "enabled",
        "loaded",
        "memory",
        "computing_in",
        "kv_in_use",
        "pinned",
        "last_used",
    )
    list_filter = (
        "enabled",
        "purpose",
        "vision",
        "source",
        "family",
        "pinned",
        "default_for_unknown_ids",
        "context_overflow",
    )
    form = CatalogModelForm
    search_fields = ("public_id", "display_name", "location")
    autocomplete_fields = ("base_model",)
    readonly_fields = ("created", "updated", "last_used", "family_detected", "running_with")
    actions = ("warm", "unload", "enable", "disable")
    fieldsets = (
        (None, {"fields": ("public_id", "display_name", "enabled", "preload", "pinned")}),
        (
            "Ids clients send",
            {
                "fields": ("aliases", "default_for_unknown_ids"),
                "description": "Agents ask for the vendor's ids: Claude Code for claude-* "
                "(and a small fast claude-haiku-*), Codex for gpt-*. Name them here to serve "
                "them with this model.",
            },
        ),
        ("Kind", {"fields": ("purpose", "vision")}),
        (
            "Embeddings",
            {
                "fields": (
                    "pooling",
                    "normalize",
                    "query_prefix",
                    "document_prefix",
                    "max_input_tokens",
                    "truncate_inputs",
                ),
                "description": "Used only when the model is for embeddings (max input tokens: "
                "also for reranking).",
            },
        ),
        (
            "Weights",
            {
                "fields": (
                    "source",
                    "location",
                    "base_model",
                    "family",
                    "family_detected",
                    "compute_format",
                    "activations",
                    "kv_cache",
                    "context_length",
                    "parallel",
                    "running_with",
                )
            },
        ),
        (
            "Generation defaults",
            {
                "fields": (
                    "default_max_tokens",
                    "default_temperature",
                    "default_top_p",
                    "speculative",
                    "draft_model",
                    "draft_tokens",
                    "system_prompt",
                )
            },
        ),
        ("Limits", {"fields": ("max_output_tokens", "context_overflow")}),
        ("History", {"fields": ("created", "updated", "last_used")}),
    )

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if db_field.name in ("query_prefix", "document_prefix"):
            kwargs["strip"] = False  # "query: " (e5) needs its trailing space
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        limit = own_context_of(obj) if obj is not None else None
        field = form.base_fields.get("context_length")  # absent on a view-only page
        if limit and field is not None:  # what a blank box means
            field.widget.attrs["placeholder"] = f"{limit} (the model's own)"
        return form

    def save_model(self, request, entry: CatalogModel, form, change: bool) -> None:
        before = self._stored_spec(entry) if change else None
        super().save_model(request, entry, form, change)
        state = self._loaded_id(before.model_id) if before else None
        note = saved_note(state, before, entry.spec(), entry.enabled)
        if note:
            self.message_user(request, note, messages.INFO)

    def _stored_spec(self, entry: CatalogModel) -> LoadSettings | None:
        stored = CatalogModel.objects.select_related(*CatalogModel.RELATED).filter(pk=entry.pk)
        row = stored.first()
        return row.spec() if row is not None else None

    def _loaded(self, entry: CatalogModel) -> LoadedModel | None:
        return self._loaded_id(entry.public_id)

    def _loaded_id(self, model_id: str) -> LoadedModel | None:
        # The engine's snapshot (catalog/pool_seam.py): never waits for it, never starts it.
        return loaded_model(model_id)

    @admin.display(description="running with")
    def running_with(self, entry: CatalogModel) -> str:
        """What the pool really loaded (the setting may say auto); read off the engine."""
        if entry.pk is None:
            return "-"
        state = self._loaded(entry)
        if state is None:
            return "not loaded: warm it (the actions of the list) to see what it runs with"
        return running_with(state)

    @admin.display(description="family in use")
    def family_detected(self, entry: CatalogModel) -> str:
        """The family requests get and why; with one chosen here, what the model itself shows."""
        if entry.pk is None:
            return "-"
        choice = choose_family(entry, list(ModelFamily.objects.all()))
        name = choice.family.name if choice.family else "none"
        text = f"{name} — {choice.reason}"
        found = model_detection(entry) if entry.family_id is not None else None
        if found is not None:
            text += f" (the model itself shows {found.slug}: {found.reason})"
        return text

    @admin.display(description="answers to")
    def answers_to(self, entry: CatalogModel) -> str:
        names = list(entry.aliases)
        if entry.default_for_unknown_ids:
            names.append("(unknown ids)")
        return ", ".join(names) or "-"

    @admin.display(boolean=True)
    def loaded(self, entry: CatalogModel) -> bool:
        return self._loaded(entry) is not None

    @admin.display(description="memory")
    def memory(self, entry: CatalogModel) -> str:
        loaded = self._loaded(entry)
        return f"{loaded.bytes / 2**20:.0f} MiB" if loaded else "-"

    @admin.display(description="computing in")
    def computing_in(self, entry: CatalogModel) -> str:
        loaded = self._loaded(entry)
        if loaded is None:
            return f"({entry.compute_format})"
        text = loaded.compute_format
        if loaded.activations:
            text = f"{text}, {loaded.activations} activations"
        return f"{text}; {loaded.q6k}" if loaded.q6k else text

    @admin.display(description="KV cache")
    def kv_in_use(self, entry: CatalogModel) -> str:
        """What the loaded model's KV cache really is (the format, its group, what stays
        float16); the setting in parentheses while it is not loaded."""
        loaded = self._loaded(entry)
        if loaded is None or not loaded.kv_cache:
            return f"({entry.kv_cache})"
        return f"{loaded.kv_cache}, {loaded.context_length} tokens of context"

    def has_operate_pool_permission(self, request) -> bool:
        return request.user.has_perm("catalog.operate_pool")

    @admin.action(description="Warm (load into the running server)", permissions=["operate_pool"])
    def warm(self, request, queryset) -> None:
        for entry in queryset:
            try:
                result = pool().warm(entry.public_id)
            except PoolRefused as exc:
                self.message_user(request, f"{entry}: {exc.message}", messages.ERROR)
                continue
            seconds = result["load_seconds"]
            note = "already loaded" if result["already_loaded"] else f"loaded in {seconds:.1f}s"
            self.message_user(request, f"{entry}: {note}", messages.SUCCESS)

    @admin.action(description="Enable (clients may use it)", permissions=["change"])
    def enable(self, request, queryset) -> None:
        try:
            with transaction.atomic():
                queryset.update(enabled=True)
        except IntegrityError:  # the one-default-per-purpose constraint
            self.message_user(
                request,
                "Not enabled: two enabled models of one purpose would both be the default for "
                "unknown ids. Untick it on one of them first.",
                messages.ERROR,
            )

    @admin.action(
        description="Disable (clients get 404; unload it to free memory)", permissions=["change"]
    )
    def disable(self, request, queryset) -> None:
        queryset.update(enabled=False)

    @admin.action(description="Unload (free its memory)", permissions=["operate_pool"])
    def unload(self, request, queryset) -> None:
        for entry in queryset:
            result = pool().unload(entry.public_id)
            note = "unloaded" if result["unloaded"] else "was not loaded"
            self.message_user(request, f"{entry}: {note}", messages.SUCCESS)


class GGUFImportForm(forms.ModelForm):
    # Optional: a form (or script) that leaves it out keeps the quantized weights.
    weights = forms.ChoiceField(
        choices=GGUFImport.Weights.choices,
        required=False,
        help_text=GGUFImport._meta.get_field("weights").help_text,
    )

    class Meta:
        model = GGUFImport
        fields = ("model_id", "source_path", "upload", "family", "weights")

    def clean_weights(self) -> str:
        return self.cleaned_data["weights"] or GGUFImport.Weights.QUANTIZED


@admin.register(GGUFImport)
class GGUFImportAdmin(FailedJobs, admin.ModelAdmin):
    """Converting a GGUF runs `manage.py import_gguf` in its own process (MLX stays out of the
    server's request threads); the list shows its progress and refreshes while it runs, and a
    failed import's reason, log and Retry."""

    list_display = (
        "model_id",
        "source",
        "weights",
        "status",
        "progress_bar",
        "outcome_actions",
        "imported",
        "created",
    )
    form = GGUFImportForm
    fields = ("model_id", "source_path", "upload", "family", "weights")
    # What a started import's page shows besides what it was started with.
    job_fields = ("status", "progress_bar", "outcome", "imported", "created", "finished")
    readonly_fields = ("progress_bar", "outcome")
    change_list_template = "admin/catalog/ggufimport/change_list.html"

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # an import is started, watched and deleted; never edited

    def get_urls(self):
        view = self.admin_site.admin_view(partial(sources_view, model_admin=self))
        sources = path("sources/", view, name="catalog_ggufimport_sources")
        return [sources, *self.job_urls(), *super().get_urls()]

    def get_fields(self, request, obj=None):
        return self.fields if obj is None else (*self.fields, *self.job_fields)

    @admin.display(description="from")
    def source(self, job: GGUFImport) -> str:
        return job.source_label

    @admin.display(description="progress")
    def progress_bar(self, job: GGUFImport):
        return format_html(
            '<progress max="100" value="{}"></progress> {}%', job.progress, job.progress
        )

    def save_model(self, request, job: GGUFImport, form, change: bool) -> None:
        super().save_model(request, job, form, change)
        self.start_import(request, job)

    def retry_refusal(self, job: GGUFImport) -> str | None:
        if job.upload and not job.upload.storage.exists(job.upload.name):
            return (
                f"{job.model_id}'s uploaded file was deleted after the failed attempt; upload "
                "it again as a new import."
            )
        try:
            job.clean()
        except ValidationError as exc:
            return " ".join(exc.messages)
        return None

    def restart(self, request, job: GGUFImport) -> None:
        self.start_import(request, job)

    def start_import(self, request, job: GGUFImport) -> None:
        process = start_command(import_command(job), job_log_path(job))
        # Known at once, so that an import killed before it starts is found out too.
        GGUFImport.objects.filter(pk=job.pk).update(pid=getattr(process, "pid", None))
        self.message_user(request, f"Importing {job.model_id} in the background.")

    def changelist_view(self, request, extra_context=None):
        GGUFImport.reap_lost()
        running = GGUFImport.objects.filter(status__in=GGUFImport.ACTIVE).exists()
        return super().changelist_view(request, {**(extra_context or {}), "refresh": running})


def import_command(job: GGUFImport) -> list[str]:
    """The command line that imports the job; for Ollama by name, so that its template,
    parameters and system prompt apply."""
    command = [sys.executable, str(settings.BASE_DIR / "manage.py"), "import_gguf"]
    if job.origin == GGUFImport.Origin.OLLAMA:
        command += ["--ollama", job.origin_name]
    elif job.origin == GGUFImport.Origin.LMSTUDIO:
        command += ["--lmstudio", job.origin_name]
    command += ["--id", job.model_id, "--job", str(job.pk)]
    if job.family:
        command += ["--family", job.family.slug]
    if job.weights != GGUFImport.Weights.QUANTIZED:
        command += ["--weights", job.weights]
    if job.origin == GGUFImport.Origin.FILE:
        # After "--": a file named "-x.gguf" or "--help" is a path, never an option.
        command += ["--", job.gguf_path]
    return command


def own_context_of(entry: CatalogModel) -> int | None:
    """The model's own context from its files (a LoRA adapter's: its base's); None where they
    cannot be read here (a hub repo not in the local cache)."""
    model = entry.base_model if entry.source == CatalogModel.Source.LORA else entry
    folder = model_folder(model) if model is not None else None
    config = read_config(folder) if folder is not None else None
    return own_context(config) if config is not None else None


# Registered by its own module, which the admin's autodiscovery reaches through this import.
from catalog import pull_admin  # noqa: E402, F401
