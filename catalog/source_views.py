"""The admin's "Import from Ollama / LM Studio" page: what those folders hold, and a button per
model that starts a background `import_gguf` (the GGUF import list shows its progress).

It reads manifests and folder listings only; the conversion (MLX) runs in the command's own
process, started by GGUFImportAdmin.start_import.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse

from catalog.gguf_sources import (
    Found,
    SourceError,
    list_lmstudio,
    list_ollama,
    read_lmstudio,
    read_ollama,
)
from catalog.models import CatalogModel, GGUFImport

SOURCES_URL = "admin:catalog_ggufimport_sources"


@dataclass(frozen=True)
class Folder:
    origin: str
    title: str
    setting: str
    path: Path
    found: list[Found]

    @property
    def exists(self) -> bool:
        return self.path.is_dir()


def folders() -> list[Folder]:
    ollama, lmstudio = Path(settings.OLLAMA_MODELS_DIR), Path(settings.LMSTUDIO_MODELS_DIR)
    return [
        Folder(
            GGUFImport.Origin.OLLAMA,
            "Ollama",
            "OLLAMA_MODELS_DIR",
            ollama,
            list_ollama(ollama) if ollama.is_dir() else [],
        ),
        Folder(
            GGUFImport.Origin.LMSTUDIO,
            "LM Studio",
            "LMSTUDIO_MODELS_DIR",
            lmstudio,
            list_lmstudio(lmstudio) if lmstudio.is_dir() else [],
        ),
    ]


def sources_view(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    if not model_admin.has_add_permission(request):
        raise PermissionDenied
    if request.method == "POST":
        return _start(request, model_admin)
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": GGUFImport._meta,
        "title": "Import from Ollama / LM Studio",
        "folders": folders(),
        "catalog_ids": set(CatalogModel.objects.values_list("public_id", flat=True)),
        "weights": GGUFImport.Weights.choices,
    }
    return TemplateResponse(request, "admin/catalog/ggufimport/sources.html", context)


def _start(request: HttpRequest, model_admin: ModelAdmin) -> HttpResponse:
    name = request.POST.get("name", "")
    try:
        job = new_job(
            request.POST.get("origin", ""),
            name,
            request.POST.get("model_id", "").strip(),
            request.POST.get("weights", GGUFImport.Weights.QUANTIZED),
        )
    except ValidationError as exc:
        messages.error(request, f"Could not import {name}: {' '.join(exc.messages)}")
        return redirect(SOURCES_URL)
    model_admin.start_import(request, job)
    return redirect("admin:catalog_ggufimport_changelist")


def new_job(origin: str, name: str, model_id: str, weights: str) -> GGUFImport:
    """A saved, queued GGUFImport for the named model, or the reason there is none."""
    try:
        if origin == GGUFImport.Origin.OLLAMA:
            path = read_ollama(Path(settings.OLLAMA_MODELS_DIR), name).gguf
        elif origin == GGUFImport.Origin.LMSTUDIO:
            path = read_lmstudio(Path(settings.LMSTUDIO_MODELS_DIR), name)
        else:
            raise ValidationError(f"unknown origin {origin!r}")
    except SourceError as exc:
        raise ValidationError(str(exc)) from None
    job = GGUFImport(
        model_id=model_id,
        origin=origin,
        origin_name=name,
        source_path=str(path),
        weights=weights,
    )
    job.full_clean()  # refuses an id another import is still running for (GGUFImport.clean)
    job.save()
    return job
