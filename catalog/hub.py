"""Downloading a repo's files from the Hugging Face hub (or a mirror at HF_ENDPOINT) for
`manage.py pull`: the file list with sizes and checksums, then each file over plain HTTP.

huggingface_hub lists the files (it speaks the hub's API, sends the user's token); the bytes
are fetched here rather than through hf_hub_download, because a pull needs what that does not
give: progress as bytes arrive (for the admin's row, not only a terminal bar), a partial file
kept where the pull can find it again when it is stopped, and the content checked against the
hub's checksum (LFS sha256, or the git blob id of small files) before it is kept.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx

# What mlx-lm's own download fetches for a model (mlx_lm.utils._download's allow_patterns):
# the weights, configs and tokenizer, not READMEs, images or other formats' weights.
MLX_PATTERNS = (
    "*.json",
    "model*.safetensors",
    "*.py",
    "tokenizer.model",
    "*.tiktoken",
    "tiktoken.model",
    "*.txt",
    "*.jsonl",
    "*.jinja",
)
CHUNK = 1 << 20
# A dropped connection is tried again from where it stopped this many times in one pull;
# past that the partial file stays for the next pull.
RETRIES = 3
TIMEOUT = httpx.Timeout(30.0, read=120.0)


class HubError(Exception):
    """What stops a pull, said so an operator can act on it."""


class NotOnHub(HubError):
    """The repo, or the file asked for, is not there (or not for this token)."""


class HubUnreachable(HubError):
    """The hub did not answer the listing."""


@dataclass(frozen=True)
class RepoFile:
    name: str
    size: int
    sha256: str | None  # LFS files: the hub's sha256 of the content
    blob_id: str | None  # other files: the git blob id (sha1 of "blob <size>\0" + content)

    @property
    def is_gguf(self) -> bool:
        return self.name.lower().endswith(".gguf")


@dataclass(frozen=True)
class Listing:
    repo: str
    commit: str
    files: list[RepoFile]


def hub_token() -> str | None:
    """The user's hub token (HF_TOKEN, or `hf auth login`'s): gated and private repos."""
    from huggingface_hub import get_token

    return get_token()


def list_files(endpoint: str, repo: str, revision: str, token: str | None) -> Listing:
    """The repo's files at `revision`, with their sizes and checksums."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    api = HfApi(endpoint=endpoint, token=token)
    try:
        info = api.model_info(repo, revision=revision, files_metadata=True)
    except RepositoryNotFoundError:
        raise NotOnHub(f"{repo} was not found on {endpoint} (or it needs a token)") from None
    except (HfHubHTTPError, httpx.HTTPError) as exc:
        raise HubUnreachable(f"could not list {repo}@{revision} on {endpoint}: {exc}") from None
    files = [
        RepoFile(
            name=sibling.rfilename,
            size=(sibling.lfs.size if sibling.lfs else sibling.size) or 0,
            sha256=sibling.lfs.sha256 if sibling.lfs else None,
            blob_id=sibling.blob_id,
        )
        for sibling in info.siblings or []
    ]
    return Listing(repo, info.sha or revision, files)


def choose_files(listing: Listing, gguf_file: str | None) -> list[RepoFile]:
    """The files a pull fetches: the one GGUF file asked for, or an MLX model's files."""
    ggufs = [file for file in listing.files if file.is_gguf]
    if gguf_file:
        chosen = [file for file in ggufs if file.name == gguf_file]
        if not chosen:
            raise HubError(f"{listing.repo} has no file {gguf_file!r}; {_gguf_choices(ggufs)}")
        return chosen
    files = [f for f in listing.files if any(fnmatch.fnmatch(f.name, p) for p in MLX_PATTERNS)]
    if not any(file.name.endswith(".safetensors") for file in files):
        if ggufs:
            raise HubError(
                f"{listing.repo} holds GGUF files: name one as {listing.repo}:FILE or with "
                f"--file; {_gguf_choices(ggufs)}"
            )
        raise HubError(f"{listing.repo} has no safetensors weights and no GGUF file")
    return files


def gguf_for_quantization(listing: Listing, quantization: str | None) -> RepoFile | None:
    """The GGUF file a quantization names (`Q4_K_M`, any case), as Ollama reads the tag of an
    `hf.co/owner/repo:TAG`: the file whose name holds it as a whole part of the name (`Q4_K`
    is not `Q4_K_M`'s file). No tag: Q4_K_M when the repo has it, else the one GGUF file, else
    the first of a few common ones. None for a repo without GGUF files (an MLX repo, whole)."""
    ggufs = [file for file in listing.files if file.is_gguf and not _is_projector(file)]
    if not ggufs:
        if quantization:
            raise NotOnHub(f"{listing.repo} has no GGUF files for the tag {quantization!r}")
        return None
    for wanted in [quantization] if quantization else DEFAULT_QUANTIZATIONS:
        chosen = [file for file in ggufs if _names_quantization(file.name, wanted)]
        if len(chosen) > 1:
            names = ", ".join(file.name for file in chosen)
            raise HubError(f"{listing.repo} has more than one file for {wanted}: {names}")
        if chosen:
            return chosen[0]
        if not quantization and len(ggufs) == 1:
            return ggufs[0]
    asked = quantization or "Q4_K_M"
    raise NotOnHub(f"{listing.repo} has no GGUF file for {asked}; {_gguf_choices(ggufs)}")


# What a tagless Ollama pull takes, in this order (Ollama's default is Q4_K_M).
DEFAULT_QUANTIZATIONS = ("Q4_K_M", "Q4_K_S", "Q4_0", "Q5_K_M", "Q8_0")


def _names_quantization(name: str, quantization: str) -> bool:
    # Bounded on both sides: `_` may come before (model_Q4_0), not after (Q4_K is not Q4_K_M).
    pattern = rf"(?<![a-z0-9]){re.escape(quantization.lower())}(?![a-z0-9_])"
    return re.search(pattern, name.lower()) is not None


def _is_projector(file: RepoFile) -> bool:
    """A vision model's projector (mmproj-*.gguf) sits beside its weights; it is not a model."""
    return "mmproj" in file.name.lower()


def _gguf_choices(ggufs: list[RepoFile]) -> str:
    if not ggufs:
        return "it has no GGUF files"
    return "its GGUF files: " + ", ".join(f"{f.name} ({f.size / 2**20:.0f} MiB)" for f in ggufs)


def missing_bytes(files: Iterable[RepoFile], folder: Path) -> int:
    """What is still to download into `folder`: the files less what is there (kept partials)."""
    return sum(file.size - min(file.size, _have(folder, file)) for file in files)


def _have(folder: Path, file: RepoFile) -> int:
    done, part = folder / file.name, partial_path(folder / file.name)
    if done.is_file():
        return done.stat().st_size
    return part.stat().st_size if part.is_file() else 0


def partial_path(target: Path) -> Path:
    return target.with_name(target.name + ".part")


def free_bytes(folder: Path) -> int:
    """Free space where `folder` is (or will be): the one place the pull reads it."""
    while not folder.exists():
        folder = folder.parent
    return shutil.disk_usage(folder).free


def check_space(needed: int, folder: Path) -> None:
    free = free_bytes(folder)
    if needed > free:
        raise HubError(
            f"not enough disk space in {folder}: the pull needs {needed / 2**20:.1f} MiB more, "
            f"{free / 2**20:.1f} MiB are free"
        )


def private_folders(folder: Path) -> None:
    """Makes the folder and its missing parents owner-only (0700), as var/ is made (its models
    folder and the pulls' staging are made here first): `mkdir(parents=True)` would leave each
    at the umask's 0755. Folders that exist keep their mode."""
    for path in reversed([p for p in (folder, *folder.parents) if not p.exists()]):
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:  # made this moment by another process
            continue
        path.chmod(0o700)  # mkdir's mode passes through the umask; this does not


def file_url(endpoint: str, repo: str, commit: str, name: str) -> str:
    return f"{endpoint.rstrip('/')}/{repo}/resolve/{quote(commit, safe='')}/{quote(name)}"


def download(
    client: httpx.Client, url: str, target: Path, file: RepoFile, advance: Callable[[int], None]
) -> None:
    """Fetches `file` into `target`, resuming its partial; checks it, then moves it in place.
    A drop retries from where it stopped; Ctrl-C or SIGTERM leaves the partial for next time."""
    if target.is_file() and target.stat().st_size == file.size:
        return  # kept by an earlier pull, checked then
    part = partial_path(target)
    private_folders(part.parent)
    for attempt in range(RETRIES + 1):
        try:
            _fetch(client, url, part, file, advance)
            break
        except (httpx.TransportError, _Short) as exc:
            if attempt == RETRIES:
                raise HubError(
                    f"the connection dropped while fetching {file.name} ({exc}); "
                    "pull again to resume"
                ) from None
    _verify(part, file)
    part.rename(target)


class _Short(Exception):
    """The server ended a response before the file's size."""


def _fetch(
    client: httpx.Client, url: str, part: Path, file: RepoFile, advance: Callable[[int], None]
) -> None:
    have = part.stat().st_size if part.is_file() else 0
    if have > file.size:  # not this file's partial: start over
        part.unlink()
        advance(-have)
        have = 0
    if have == file.size and have:
        return
    headers = {"Range": f"bytes={have}-"} if have else {}
    with client.stream("GET", url, headers=headers) as response:
        if response.status_code >= 400:
            raise HubError(f"{file.name}: the hub answered {response.status_code}")
        if have and response.status_code != 206:  # Range not honoured: the whole file comes
            advance(-have)
            have = 0
        with part.open("ab" if have else "wb") as out:
            for chunk in response.iter_raw(CHUNK):
                out.write(chunk)
                advance(len(chunk))
    if part.stat().st_size < file.size:
        raise _Short(f"{part.stat().st_size} of {file.size} bytes")


def _verify(part: Path, file: RepoFile) -> None:
    """The content against the hub's checksum; a wrong file is removed, never kept."""
    if file.sha256:
        expected, digest = file.sha256, hashlib.sha256()
    elif file.blob_id:
        expected, digest = file.blob_id, hashlib.sha1(usedforsecurity=False)
        digest.update(f"blob {part.stat().st_size}\0".encode())
    else:
        return
    with part.open("rb") as source:
        while block := source.read(CHUNK):
            digest.update(block)
    if digest.hexdigest() != expected:
        part.unlink()
        raise HubError(
            f"{file.name} does not match the hub's checksum ({expected[:12]}…): it was "
            "removed; pull again to fetch it anew"
        )
