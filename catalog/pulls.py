"""Starting a hub pull: a `HubPull` row and `manage.py pull --job N` in its own process (the
download and a GGUF's conversion never hold a server thread), for the admin's *Hub pulls* and
Ollama's POST /api/pull alike. Cancelling stays the admin's (catalog/pull_admin.py)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from dataclasses import dataclass

from django.conf import settings

from catalog.background import job_log_path, start_command
from catalog.hub import choose_files, gguf_for_quantization, hub_token, list_files
from catalog.models import HubPull


@dataclass(frozen=True)
class Planned:
    """What a pull of a repo (and a quantization of it) will fetch, known before it starts."""

    filename: str  # the GGUF file; "" for an MLX repo, fetched whole
    digest: str  # the GGUF's sha256; for an MLX repo, one made from the repo and its commit
    total: int  # bytes


def plan_pull(repo: str, quantization: str | None, revision: str = "main") -> Planned:
    """Lists the repo on the hub (HF_ENDPOINT; a network call: run it off the event loop) and
    picks its files; HubError (NotOnHub: no such repo or file) says why it cannot be pulled."""
    listing = list_files(settings.HF_ENDPOINT, repo, revision, hub_token())
    gguf = gguf_for_quantization(listing, quantization)
    if gguf is not None:
        digest = gguf.sha256 or hashlib.sha256(f"{repo}:{gguf.name}".encode()).hexdigest()
        return Planned(gguf.name, digest, gguf.size)
    files = choose_files(listing, None)
    digest = hashlib.sha256(f"{repo}@{listing.commit}".encode()).hexdigest()
    return Planned("", digest, sum(file.size for file in files))


def pull_command(job: HubPull) -> list[str]:
    command = [sys.executable, str(settings.BASE_DIR / "manage.py"), "pull", job.repo]
    command += ["--revision", job.revision, "--id", job.model_id, "--job", str(job.pk)]
    if job.filename:
        command += ["--file", job.filename]
    if job.family:
        command += ["--family", job.family.slug]
    for alias in job.aliases:
        command += ["--alias", alias]
    return command


def start_pull(job: HubPull) -> subprocess.Popen:
    process = start_command(pull_command(job), job_log_path(job))
    # The cancel button signals this process; the command writes its own pid again at start.
    HubPull.objects.filter(pk=job.pk).update(pid=getattr(process, "pid", None))
    return process


def begin_pull(
    repo: str, filename: str, model_id: str, aliases: list[str]
) -> tuple[HubPull, subprocess.Popen | None]:
    """The running pull for `model_id` when there is one (a second client asking for the same
    model follows it, as Ollama's pulls of one model share their download), else a new row,
    checked as the admin checks it, and its process (None when it was already running).
    ValidationError says why not: the id is taken, or the repo or an alias is not valid."""
    active = HubPull.objects.filter(model_id=model_id, status__in=HubPull.ACTIVE)
    running = active.filter(repo=repo, filename=filename).first()
    if running is not None:
        return running, None
    job = HubPull(repo=repo, filename=filename, model_id=model_id, aliases=aliases)
    job.full_clean()  # its aliases too, before any byte is downloaded
    job.save()
    return job, start_pull(job)
