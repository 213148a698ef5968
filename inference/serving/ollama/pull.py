"""POST /api/pull. A model the catalog already serves (its id, or an exact alias) is pulled at
once, as Ollama answers for a model it has. A Hugging Face name, `hf.co/owner/repo[:TAG]` (or
`huggingface.co/...`), is pulled from the hub (HF_ENDPOINT) as Ollama pulls it: the tag picks
the GGUF file of that quantization (none: Q4_K_M), an MLX repo is fetched whole; only an
operator (the admin token) may, since it spends the server's disk and bandwidth. The pull runs
as the admin's *Hub pulls* do (catalog/pulls.py: a HubPull row, `manage.py pull` in its own
process), so a client that leaves does not stop it; the stream reports the row's bytes in
Ollama's progress lines. Any other name (Ollama's own registry) is refused."""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError

from apikeys.auth import Caller
from catalog.aliases import same_names
from catalog.hub import HubError, HubUnreachable, NotOnHub
from catalog.models import CatalogModel, HubPull
from catalog.pulls import Planned, begin_pull, plan_pull
from inference.protocol.errors import APIError
from inference.protocol.ollama.errors import OllamaError
from inference.protocol.ollama.requests import HUB_PREFIX, PullRequest
from inference.protocol.ollama.responses import ProgressResponse, StatusResponse
from inference.serving.ollama.dialect import error_lines, one_object
from inference.serving.resolve import find_model
from inference.serving.sse import NDJSON, EventStream, ndjson_line

# `hf.co/owner/repo` and an optional tag, as catalog_id spells a hub name.
HUB_NAME = re.compile(r"^hf\.co/([A-Za-z0-9][\w.-]*)/([A-Za-z0-9][\w.-]*)(?::([\w.-]+))?$")
# How often the pull's row is read while it runs (the command writes it as often).
POLL_SECONDS = 0.5
# How long a pull is followed before the answer gives up on it (it goes on): a big model on
# a slow line takes hours, and a client that waits without a stream has nothing else to see.
PULL_DEADLINE = 6 * 3600.0


@dataclass(frozen=True)
class HubName:
    owner: str
    repo: str  # its name under the owner
    tag: str | None

    @property
    def full(self) -> str:
        return f"{self.owner}/{self.repo}"

    @property
    def alias(self) -> str:
        """The name a client sends after pulling it, as catalog_id spells it."""
        return f"{HUB_PREFIX}{self.full}" + (f":{self.tag}" if self.tag else "")

    def model_ids(self) -> list[str]:
        """The catalog ids to try, in order (a public id has no slashes): the repo and tag,
        then with the owner, for another owner's repo of the same name."""
        own = f"{self.repo}-{self.tag}" if self.tag else self.repo
        return [own.lower(), f"{self.owner}-{own}".lower()]


def hub_name(model: str) -> HubName | None:
    found = HUB_NAME.match(model)
    return HubName(*found.groups()) if found else None


def pull_unavailable(name: str) -> APIError:
    return APIError(
        f"pull is not available on this server for '{name}': it is not in its catalog, and "
        "only Hugging Face names (hf.co/owner/repo:QUANT) are pulled, by its operator.",
        status=501,
        param="model",
        code="pull_unavailable",
    )


def operator_only(name: str) -> APIError:
    return APIError(
        f"'{name}' is not in this server's catalog: pulls from the hub need the admin token "
        "(Authorization: Bearer ADMIN_TOKEN), not an API key.",
        status=403,
        type="permission_error",
        code="pull_needs_admin_token",
    )


async def pull_model(request: PullRequest, caller: Caller) -> StatusResponse | EventStream:
    if await in_catalog(request.model, caller):
        status = StatusResponse(status="success")
        return one_object(status) if request.stream else status
    hub = hub_name(request.model)
    if hub is None:
        raise pull_unavailable(request.name)
    if not caller.operator:
        raise operator_only(request.name)
    events = follow(await start(hub))
    if request.stream:
        return EventStream(_progress_lines(events), error_lines, NDJSON)
    async for event in events:  # the last one says how it ended
        if isinstance(event, OllamaError):
            raise APIError(event.error, status=500, code="pull_failed")
    return StatusResponse(status="success")


async def in_catalog(model: str, caller: Caller) -> bool:
    """Whether `model` names a catalog row itself: its id or an exact alias (the default for
    unknown ids would answer any name)."""
    for purpose in ("chat", "embedding"):
        entry = await find_model(model, caller, purpose)
        names = same_names(model)  # Ollama's `x` and `x:latest` are one name
        if entry is not None and any(n == entry.public_id or n in entry.aliases for n in names):
            return True
    return False


@dataclass(frozen=True)
class Started:
    job_id: int
    planned: Planned
    process: subprocess.Popen | None  # None: following a pull another request started


async def start(hub: HubName) -> Started:
    """Lists the repo (off the event loop), picks a free catalog id and starts the pull."""
    try:
        planned = await asyncio.to_thread(plan_pull, hub.full, hub.tag)
    except HubError as exc:
        raise APIError(str(exc), status=_status(exc), param="model", code="pull_failed") from None
    model_id = await _free_id(hub.model_ids())
    try:
        job, process = await sync_to_async(begin_pull)(
            hub.full, planned.filename, model_id, [hub.alias]
        )
    except ValidationError as exc:
        message = f"cannot pull {hub.alias}: {' '.join(exc.messages)}"
        raise APIError(message, status=409, param="model", code="pull_conflict") from None
    return Started(job.pk, planned, process)


def _status(error: HubError) -> int:
    if isinstance(error, NotOnHub):
        return 404
    return 502 if isinstance(error, HubUnreachable) else 400


async def _free_id(candidates: list[str]) -> str:
    for model_id in candidates:
        if not await CatalogModel.objects.filter(public_id=model_id).aexists():
            return model_id
    return candidates[-1]  # taken too: begin_pull's check says so


async def follow(started: Started) -> AsyncIterator[ProgressResponse | OllamaError]:
    """Ollama's progress lines from the pull's row: the manifest, the file's bytes as they
    grow, the checks and the end; an error object when it fails or is cancelled."""
    planned = started.planned
    yield ProgressResponse(status="pulling manifest")
    layer = ProgressResponse(
        status=f"pulling {planned.digest[:12]}",
        digest=f"sha256:{planned.digest}",
        total=planned.total,
        completed=0,
    )
    yield layer
    completed = 0
    async for job in _watch(started):
        if isinstance(job, OllamaError):
            yield job
            return
        if job.bytes_done != completed and job.status != HubPull.Status.DONE:
            completed = max(0, min(job.bytes_done, planned.total))
            yield layer.model_copy(update={"completed": completed})
    yield layer.model_copy(update={"completed": planned.total})
    for status in ("verifying sha256 digest", "writing manifest", "success"):
        yield ProgressResponse(status=status)


async def _watch(started: Started) -> AsyncIterator[HubPull | OllamaError]:
    """The row, read every POLL_SECONDS until it is done (the last row given); an error when
    it failed, was cancelled, its process ended without saying so, or past the deadline."""
    deadline = time.monotonic() + PULL_DEADLINE
    while time.monotonic() < deadline:
        job = await HubPull.objects.aget(pk=started.job_id)
        if job.status == HubPull.Status.DONE:
            return
        if job.status not in HubPull.ACTIVE:
            yield OllamaError(error=f"pull {job.status}: {job.message or 'see the server log'}")
            return
        if started.process is not None and started.process.poll() is not None:
            # The process may have written its end just before exiting: read once more.
            job = await HubPull.objects.aget(pk=started.job_id)
            if job.status in HubPull.ACTIVE:
                yield OllamaError(error=f"the pull's process ended; see var/pulls/{job.pk}.log")
                return
            continue
        yield job
        await asyncio.sleep(POLL_SECONDS)
    yield OllamaError(error="the pull is still running; ask again to follow it")


async def _progress_lines(
    events: AsyncIterator[ProgressResponse | OllamaError],
) -> AsyncIterator[str]:
    # Leaving (the client gone) closes only this generator: the pull's process goes on.
    async for event in events:
        yield ndjson_line(event)
