"""Background jobs that make catalog models: GGUF imports and hub pulls, and what both do with
their rows (an id refused while taken, a row whose process died marked failed)."""

from __future__ import annotations

from pathlib import Path

from django.core.exceptions import ValidationError
from django.db import models
from django.utils.timezone import now

from catalog.aliases import validate_alias_list
from catalog.models.catalog import CatalogModel
from catalog.models.prompting import ModelFamily
from catalog.processes import LOST, process_alive
from catalog.validators import public_id_validator, validate_hf_repo


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
