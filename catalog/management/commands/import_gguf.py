from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.timezone import now
from tqdm import tqdm

from catalog.aliases import ALIAS, add_alias_argument, same_names, source_aliases
from catalog.gguf_sources import (
    Found,
    OllamaModel,
    SourceError,
    default_model_id,
    list_lmstudio,
    list_ollama,
    read_lmstudio,
    read_ollama,
)
from catalog.management.options import error_messages, family_by_slug, sigterm_unwinds
from catalog.models import CatalogModel, GGUFImport, ModelFamily
from inference.conversion.gguf import UnsupportedGGUF, convert_gguf


@dataclass(frozen=True)
class Source:
    """The GGUF file to convert, the id it gets, and Ollama's settings when it came from there.
    `names`: what Ollama or LM Studio call it, which its clients send (aliases, if free);
    `display_name`: the one it is shown by, the first of those names else the id (the GGUF's
    own general.name is the base model's, e.g. "Smollm2 135M 8k Lc100K Mix1 Ep2")."""

    gguf: Path
    model_id: str
    ollama: OllamaModel | None = None
    names: tuple[str, ...] = ()

    @property
    def display_name(self) -> str:
        return self.names[0] if self.names else self.model_id


class Command(BaseCommand):
    help = (
        "Convert a Llama-architecture GGUF file into an MLX model and add it to the catalog: "
        "a file by path, or one Ollama or LM Studio downloaded (--list shows them)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path, nargs="?", help="the .gguf file")
        where = parser.add_mutually_exclusive_group()
        where.add_argument(
            "--ollama",
            metavar="NAME[:TAG]",
            help="a model Ollama pulled (llama3.2, user/model:tag), from OLLAMA_MODELS_DIR",
        )
        where.add_argument(
            "--lmstudio",
            metavar="PUBLISHER/REPO[/FILE.gguf]",
            help="a model LM Studio downloaded, from LMSTUDIO_MODELS_DIR",
        )
        where.add_argument(
            "--list",
            action="store_true",
            dest="list_models",
            help="list what the Ollama and LM Studio folders hold, and import nothing",
        )
        parser.add_argument(
            "--id",
            dest="model_id",
            help="public model id (required for a path; --ollama/--lmstudio default to the name)",
        )
        parser.add_argument("--family", help="family slug (default: from the chat template)")
        parser.add_argument(
            "--name", help="display name (default: the Ollama or LM Studio name, else the id)"
        )
        add_alias_argument(parser)
        parser.add_argument("--max-tokens", type=int, help="default max_tokens for requests")
        parser.add_argument("--temperature", type=float, help="default temperature")
        parser.add_argument("--top-p", type=float, help="default top_p")
        parser.add_argument(
            "--weights",
            choices=GGUFImport.Weights.values,
            default=GGUFImport.Weights.QUANTIZED,
            help="keep the weights quantized (default), or dequantize them into float16/float32",
        )
        parser.add_argument(
            "--job", type=int, help="report progress and outcome in this GGUFImport (admin)"
        )
        parser.add_argument(
            "--if-missing",
            action="store_true",
            help="do nothing when the catalog already has this id and its weights exist",
        )

    def handle(self, *args, job: int | None, list_models: bool, **options) -> None:
        if list_models:
            self._list()
            return
        self._notes: list[str] = []
        with sigterm_unwinds():
            self._handle_import(job, **options)

    def _handle_import(self, job: int | None, **options) -> None:
        self._job = GGUFImport.objects.get(pk=job) if job else None
        if self._job is None:
            self._import(**options)
            return
        # Its own pid again: run by hand with --job, no admin recorded one.
        self._update(status=GGUFImport.Status.RUNNING, pid=os.getpid())
        try:
            entry = self._import(**options)
        except BaseException as exc:
            message = (
                str(exc) if isinstance(exc, CommandError) else "the import failed; see the log"
            )
            self._update(status=GGUFImport.Status.FAILED, message=message, finished=now())
            raise
        finally:
            # Converted or not, an uploaded GGUF is not kept: another import uploads it again.
            self._job.discard_upload()
        self._update(
            status=GGUFImport.Status.DONE,
            progress=100,
            imported=entry,
            finished=now(),
            message="; ".join(self._notes),
        )

    def _import(
        self, *, model_id: str | None, if_missing: bool, weights: str, **options
    ) -> CatalogModel | None:
        source = self._resolve(options["path"], options["ollama"], options["lmstudio"], model_id)
        existing = CatalogModel.objects.filter(public_id=source.model_id).first()
        if existing and if_missing and (Path(existing.location) / "config.json").is_file():
            self.stdout.write(f"{source.model_id} is already in the catalog; nothing to do.")
            return existing
        if existing:
            raise CommandError(f"the catalog already has a model with id {source.model_id!r}")
        if not source.gguf.is_file():
            raise CommandError(f"{source.gguf} is not a file")
        entry = self._entry(source, **options)
        destination = Path(entry.location)
        if destination.exists():
            raise CommandError(f"{destination} already exists; remove it or pick another --id")
        try:
            converted = convert_gguf(
                source.gguf, destination, progress=self._progress, weights=weights
            )
        except UnsupportedGGUF as exc:
            raise CommandError(f"cannot import {source.gguf.name}: {exc}") from None
        # Ollama's template is the one Ollama prompts the model with: it comes first.
        ollama_family = source.ollama.family_slug if source.ollama else None
        entry.family = entry.family or detected_family(ollama_family, converted.family_slug)
        entry.save()
        for note in self._notes:
            self.stdout.write(f"note: {note}")
        self.stdout.write(
            self.style.SUCCESS(f"imported {source.gguf.name} as {entry.public_id} ({destination})")
        )
        return entry

    def _resolve(
        self, path: Path | None, ollama: str | None, lmstudio: str | None, model_id: str | None
    ) -> Source:
        if sum(bool(given) for given in (path, ollama, lmstudio)) != 1:
            raise CommandError(
                "give one of: a .gguf path, --ollama NAME, --lmstudio PUBLISHER/REPO[/FILE]; "
                "or --list to see what Ollama and LM Studio hold"
            )
        try:
            if ollama:
                found = read_ollama(settings.OLLAMA_MODELS_DIR, ollama)
                self._note_ollama(found)
                model_id = model_id or default_model_id("ollama", found.name)
                return Source(found.gguf, model_id, found, (found.name,))
            if lmstudio:
                gguf = read_lmstudio(settings.LMSTUDIO_MODELS_DIR, lmstudio)
                names = lmstudio_names(Path(settings.LMSTUDIO_MODELS_DIR), gguf)
                model_id = model_id or default_model_id("lmstudio", gguf.name)
                return Source(gguf, model_id, None, names)
        except SourceError as exc:
            raise CommandError(str(exc)) from None
        if not model_id:
            raise CommandError("--id is required when importing a .gguf file by path")
        return Source(path, model_id)

    def _note_ollama(self, found: OllamaModel) -> None:
        self._notes.extend(found.notes)
        ignored = found.ignored_params()
        if ignored:
            self._notes.append(f"Ollama parameters not applied: {', '.join(ignored)}")

    def _entry(
        self, source: Source, *, family: str | None, name: str | None, **options
    ) -> CatalogModel:
        """The catalog entry to save once converted; the command's options win over Ollama's."""
        explicit = {
            "default_max_tokens": options["max_tokens"],
            "default_temperature": options["temperature"],
            "default_top_p": options["top_p"],
        }
        ollama = source.ollama.catalog_defaults() if source.ollama else {}
        entry = CatalogModel(
            public_id=source.model_id,
            display_name=name or source.display_name,
            source=CatalogModel.Source.GGUF,
            location=str(Path(settings.MODEL_STORAGE_DIR) / source.model_id),
            family=family_by_slug(family),
            aliases=list(options["aliases"]),
            **{**ollama, **{key: value for key, value in explicit.items() if value is not None}},
        )
        self._add_source_names(entry, source.names)
        try:  # everything but the weights, which do not exist yet
            entry.clean_fields(exclude=["location"])
            entry.clean_aliases()
        except ValidationError as exc:
            raise CommandError(f"not imported: {error_messages(exc)}") from None
        return entry

    def _add_source_names(self, entry: CatalogModel, names: tuple[str, ...]) -> None:
        """Ollama's and LM Studio's names for the model become aliases, so that their clients'
        `model` reaches it at every door; a name another model holds stays that model's."""
        others = CatalogModel.objects.only("public_id", "aliases")
        added = source_aliases(names, entry, others)
        entry.aliases += added
        for left in (n for n in names if n not in entry.aliases):
            if entry.public_id in same_names(left):  # its own id already, `:latest` or not
                continue
            why = "another model has it" if ALIAS.match(left) else "not a valid id"
            self._notes.append(f"{left!r} is not an alias of {entry.public_id}: {why}")
        if added:
            self.stdout.write(f"{entry.public_id} answers to {', '.join(added)} too")

    def _list(self) -> None:
        folders = [
            ("Ollama", "OLLAMA_MODELS_DIR", list_ollama),
            ("LM Studio", "LMSTUDIO_MODELS_DIR", list_lmstudio),
        ]
        for title, setting, lister in folders:
            folder = Path(getattr(settings, setting))
            if not folder.is_dir():
                self.stdout.write(f"{title}: no folder {folder} (set {setting})")
                continue
            found = lister(folder)
            self.stdout.write(f"{title} ({folder}): {len(found)} model(s)")
            width = max((len(entry.name) for entry in found), default=0)
            for entry in found:
                self.stdout.write(f"  {listing_line(entry, width)}")

    def _progress(self, items):
        steps = list(items)
        bar = tqdm(steps, desc="importing", unit="step", file=self.stderr._out)
        for done, step in enumerate(bar):
            bar.set_postfix_str(step.__name__)
            # Floored: 100 means done, which only the end of the command says.
            self._update(progress=100 * done // len(steps), message=f"{step.__name__}…")
            yield step

    def _update(self, **fields) -> None:
        if self._job is not None:
            GGUFImport.objects.filter(pk=self._job.pk).update(**fields)


def lmstudio_names(models_dir: Path, gguf: Path) -> tuple[str, ...]:
    """What LM Studio's clients name a file by: PUBLISHER/REPO/FILE.gguf, and PUBLISHER/REPO
    when the repo holds only that model."""
    parts = gguf.relative_to(models_dir).parts
    names = ["/".join(parts)]
    try:
        if read_lmstudio(models_dir, "/".join(parts[:2])) == gguf:
            names.append("/".join(parts[:2]))
    except SourceError:  # several models there: the repo alone names none of them
        pass
    return tuple(names)


def detected_family(*slugs: str | None) -> ModelFamily | None:
    """The family of the first slug the catalog has one for."""
    families = (ModelFamily.objects.filter(slug=slug).first() for slug in slugs if slug)
    return next((family for family in families if family), None)


def listing_line(entry: Found, width: int = 0) -> str:
    name = entry.name.ljust(width)
    if entry.problem:
        return f"{name}  cannot be imported: {entry.problem}"
    quantization = entry.quantization or "?"
    return f"{name}  {human_size(entry.size):>9}  {quantization:<7}  {entry.path}"


def human_size(size: int) -> str:
    value, units = float(size), ["B", "KiB", "MiB", "GiB", "TiB"]
    while value >= 1024 and len(units) > 1:
        value /= 1024
        units.pop(0)
    return f"{size} B" if units[0] == "B" else f"{value:.1f} {units[0]}"
