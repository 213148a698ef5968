from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.timezone import now
from tqdm import tqdm

from catalog.aliases import add_alias_argument
from catalog.gguf_sources import default_model_id
from catalog.hub import (
    TIMEOUT,
    HubError,
    Listing,
    RepoFile,
    check_space,
    choose_files,
    download,
    file_url,
    hub_token,
    list_files,
    missing_bytes,
    private_folders,
)
from catalog.management.options import error_messages, family_by_slug, sigterm_unwinds
from catalog.models import CatalogModel, HubPull

# The admin's row is written at most this often while bytes arrive.
REPORT_EVERY = 0.5


@dataclass(frozen=True)
class Target:
    """What a pull fetches and the id it gets."""

    repo: str
    revision: str
    gguf_file: str | None
    model_id: str

    @property
    def staging(self) -> Path:
        """Where files land while they download; kept when a pull stops, so the next resumes."""
        return Path(settings.MODEL_STORAGE_DIR) / ".pulls" / self.model_id

    @property
    def destination(self) -> Path:
        return Path(settings.MODEL_STORAGE_DIR) / self.model_id

    @property
    def hub_name(self) -> str:
        """As the command takes it: a GGUF repo holds many quantizations, its file tells them
        apart (the GGUF's own general.name is the base model's, the same for each)."""
        return f"{self.repo}:{self.gguf_file}" if self.gguf_file else self.repo


class Command(BaseCommand):
    help = (
        "Download a model from the Hugging Face hub (HF_ENDPOINT) and add it to the catalog: "
        "an MLX (safetensors) repo, or one GGUF file of a repo (REPO:FILE), then imported as "
        "import_gguf does. A stopped pull resumes where it stopped."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("repo", help="owner/name, or owner/name:FILE.gguf for a GGUF repo")
        parser.add_argument("--revision", default="main", help="branch, tag or commit")
        parser.add_argument("--file", help="the GGUF file of the repo to fetch and import")
        parser.add_argument("--id", dest="model_id", help="public model id (default: the name)")
        parser.add_argument("--family", help="family slug (default: from the chat template)")
        parser.add_argument(
            "--name", help="display name (default: the repo, REPO:FILE for a GGUF file of it)"
        )
        add_alias_argument(parser)
        parser.add_argument("--job", type=int, help="report progress and outcome in this HubPull")
        parser.add_argument(
            "--if-missing", action="store_true", help="do nothing when the id already exists"
        )

    def handle(self, *args, job: int | None, **options) -> None:
        self._job = HubPull.objects.get(pk=job) if job else None
        self._update(status=HubPull.Status.RUNNING, pid=os.getpid(), message="listing files…")
        with sigterm_unwinds():
            try:
                entry = self._pull(**options)
            except KeyboardInterrupt:
                self._end(HubPull.Status.CANCELLED, "cancelled; pull again to resume")
                raise CommandError("cancelled; run the same pull again to resume") from None
            except (CommandError, HubError) as exc:
                self._end(HubPull.Status.FAILED, str(exc))
                raise CommandError(str(exc)) from None
            except BaseException:
                self._end(HubPull.Status.FAILED, "the pull failed; see the log")
                raise
        self._update(
            status=HubPull.Status.DONE, progress=100, imported=entry, finished=now(), message=""
        )

    def _pull(self, *, repo: str, **options) -> CatalogModel:
        target = self._target(repo, options["revision"], options["file"], options["model_id"])
        existing = CatalogModel.objects.filter(public_id=target.model_id).first()
        if existing and options["if_missing"]:
            self.stdout.write(f"{target.model_id} is already in the catalog; nothing to do.")
            return existing
        if existing:
            raise CommandError(f"the catalog already has a model with id {target.model_id!r}")
        entry = self._entry(target, options["family"], options["name"], options["aliases"])
        if target.destination.exists():
            raise CommandError(
                f"{target.destination} already exists; remove it or pick another --id"
            )
        listing = list_files(settings.HF_ENDPOINT, target.repo, target.revision, hub_token())
        files = choose_files(listing, target.gguf_file)
        needed = missing_bytes(files, target.staging)
        # A GGUF is converted beside the download: about its size again.
        check_space(needed + (files[0].size if target.gguf_file else 0), target.staging)
        self._download(listing, files, target.staging)
        if target.gguf_file:
            return self._import_gguf(target, entry)
        return self._add(target, entry)

    def _target(
        self, repo: str, revision: str, gguf_file: str | None, model_id: str | None
    ) -> Target:
        if ":" in repo:
            repo, named = repo.split(":", 1)
            if gguf_file and gguf_file != named:
                raise CommandError(f"two files named: {named} and --file {gguf_file}")
            gguf_file = named
        name = gguf_file or repo
        return Target(repo, revision, gguf_file, model_id or default_model_id("hf", name))

    def _entry(
        self, target: Target, family: str | None, name: str | None, aliases: list[str]
    ) -> CatalogModel:
        """The catalog entry to save once the files are there, checked before any download."""
        entry = CatalogModel(
            public_id=target.model_id,
            display_name=name or target.hub_name,
            source=CatalogModel.Source.LOCAL,
            location=str(target.destination),
            family=family_by_slug(family),
            aliases=aliases,
        )
        try:
            entry.clean_fields(exclude=["location"])
            entry.clean_aliases()
        except ValidationError as exc:
            raise CommandError(f"not pulled: {error_messages(exc)}") from None
        return entry

    def _download(self, listing: Listing, files: list[RepoFile], folder: Path) -> None:
        total = sum(file.size for file in files)
        progress = Progress(self, total, total - missing_bytes(files, folder))
        headers = {"Accept-Encoding": "identity", **_auth(hub_token())}
        with (
            httpx.Client(follow_redirects=True, timeout=TIMEOUT, headers=headers) as client,
            progress,
        ):
            for file in files:
                progress.now_fetching(file.name)
                url = file_url(settings.HF_ENDPOINT, listing.repo, listing.commit, file.name)
                download(client, url, folder / file.name, file, progress.advance)

    def _add(self, target: Target, entry: CatalogModel) -> CatalogModel:
        private_folders(target.destination.parent)
        target.staging.rename(target.destination)
        entry.save()
        self.stdout.write(
            self.style.SUCCESS(f"pulled {target.repo} as {entry.public_id} ({target.destination})")
        )
        return entry

    def _import_gguf(self, target: Target, entry: CatalogModel) -> CatalogModel:
        self._update(message=f"converting {target.gguf_file}…")
        arguments = [str(target.staging / target.gguf_file), "--id", target.model_id]
        if entry.family:
            arguments += ["--family", entry.family.slug]
        arguments += ["--name", entry.display_name]
        for alias in entry.aliases:
            arguments += ["--alias", alias]
        call_command("import_gguf", *arguments, stdout=self.stdout._out, stderr=self.stderr._out)
        # The converted model is what is served; the GGUF would only double the disk it takes.
        shutil.rmtree(target.staging)
        return CatalogModel.objects.get(public_id=target.model_id)

    def _end(self, status: str, message: str) -> None:
        self._update(status=status, message=message, finished=now())

    def _update(self, **fields) -> None:
        if self._job is not None:
            HubPull.objects.filter(pk=self._job.pk).update(**fields)


class Progress:
    """The terminal's bar (bytes, total, speed) and the admin row's numbers, from one count."""

    def __init__(self, command: Command, total: int, done: int) -> None:
        self.command, self.total, self.done, self.started_with = command, total, done, done
        self.started = self.reported = time.monotonic()
        self.bar = tqdm(
            total=total,
            initial=done,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc="pulling",
            file=command.stderr._out,
        )

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info) -> None:
        self.bar.close()
        self.report()

    def now_fetching(self, name: str) -> None:
        self.bar.set_postfix_str(name)
        self.command._update(message=f"fetching {name}")

    def advance(self, count: int) -> None:
        self.done += count
        self.bar.update(count)
        if time.monotonic() - self.reported >= REPORT_EVERY:
            self.report()

    def report(self) -> None:
        self.reported = time.monotonic()
        elapsed = max(self.reported - self.started, 1e-6)
        self.command._update(
            bytes_done=self.done,
            bytes_total=self.total,
            # Floored: 100 means done, which only the end of the command says.
            progress=min(99, 100 * self.done // self.total) if self.total else 0,
            speed=(self.done - self.started_with) / elapsed,
        )


def _auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}
