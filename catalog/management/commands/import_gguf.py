from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.timezone import now
from tqdm import tqdm

from catalog.management.options import error_messages, family_by_slug
from catalog.models import CatalogModel, GGUFImport, ModelFamily
from inference.conversion.gguf import UnsupportedGGUF, convert_gguf


class Command(BaseCommand):
    help = "Convert a Llama-architecture GGUF file into an MLX model and add it to the catalog."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path, help="the .gguf file")
        parser.add_argument("--id", required=True, dest="model_id", help="public model id")
        parser.add_argument("--family", help="family slug (default: from the chat template)")
        parser.add_argument("--name", help="display name (default: the GGUF's general.name)")
        parser.add_argument("--max-tokens", type=int, help="default max_tokens for requests")
        parser.add_argument("--temperature", type=float, help="default temperature")
        parser.add_argument("--top-p", type=float, help="default top_p")
        parser.add_argument(
            "--job", type=int, help="report progress and outcome in this GGUFImport (admin)"
        )
        parser.add_argument(
            "--if-missing",
            action="store_true",
            help="do nothing when the catalog already has this id and its weights exist",
        )

    def handle(self, *args, job: int | None, **options) -> None:
        self._job = GGUFImport.objects.get(pk=job) if job else None
        if self._job is None:
            self._import(**options)
            return
        self._update(status=GGUFImport.Status.RUNNING)
        try:
            entry = self._import(**options)
        except BaseException as exc:
            message = (
                str(exc) if isinstance(exc, CommandError) else "the import failed; see the log"
            )
            self._update(status=GGUFImport.Status.FAILED, message=message, finished=now())
            raise
        self._update(
            status=GGUFImport.Status.DONE, progress=100, imported=entry, finished=now(), message=""
        )

    def _import(
        self,
        *,
        path: Path,
        model_id: str,
        family: str | None,
        name: str | None,
        if_missing: bool,
        **options,
    ) -> CatalogModel | None:
        existing = CatalogModel.objects.filter(public_id=model_id).first()
        if existing and if_missing and (Path(existing.location) / "config.json").is_file():
            self.stdout.write(f"{model_id} is already in the catalog; nothing to do.")
            return existing
        if existing:
            raise CommandError(f"the catalog already has a model with id {model_id!r}")
        if not path.is_file():
            raise CommandError(f"{path} is not a file")
        destination = Path(settings.MODEL_STORAGE_DIR) / model_id
        entry = CatalogModel(
            public_id=model_id,
            display_name=name or "",
            source=CatalogModel.Source.GGUF,
            location=str(destination),
            family=family_by_slug(family),
            default_max_tokens=options["max_tokens"],
            default_temperature=options["temperature"],
            default_top_p=options["top_p"],
        )
        try:  # everything but the weights, which do not exist yet
            entry.clean_fields(exclude=["location"])
        except ValidationError as exc:
            raise CommandError(f"not imported: {error_messages(exc)}") from None
        if destination.exists():
            raise CommandError(f"{destination} already exists; remove it or pick another --id")
        try:
            converted = convert_gguf(path, destination, progress=self._progress)
        except UnsupportedGGUF as exc:
            raise CommandError(f"cannot import {path.name}: {exc}") from None
        entry.display_name = entry.display_name or converted.name
        if entry.family is None:
            entry.family = ModelFamily.objects.filter(slug=converted.family_slug).first()
        entry.save()
        self.stdout.write(
            self.style.SUCCESS(f"imported {path.name} as {entry.public_id} ({destination})")
        )
        return entry

    def _progress(self, items):
        steps = list(items)
        bar = tqdm(steps, desc="importing", unit="step", file=self.stderr._out)
        for done, step in enumerate(bar):
            bar.set_postfix_str(step.__name__)
            self._update(progress=round(100 * done / len(steps)), message=f"{step.__name__}…")
            yield step

    def _update(self, **fields) -> None:
        if self._job is not None:
            GGUFImport.objects.filter(pk=self._job.pk).update(**fields)
