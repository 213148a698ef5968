"""`manage.py pull` against a stand-in hub (tests/support/hub_server.py): a repo lands in the
catalog and serves; a dropped download resumes with Range; a wrong checksum, too little disk and a
cancel are refused or reported; huggingface_hub itself reads the stand-in as it reads the hub."""

from __future__ import annotations

import hashlib
import io
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
from django.core.management import CommandError, call_command

from catalog import background
from catalog import hub as hub_module
from catalog.hub import RETRIES, HubError, Listing, RepoFile, gguf_for_quantization
from catalog.models import CatalogModel, HubPull
from tests.support.hub_server import stand_in_hub
from tests.support.live_server import live_server

REPO = "test-org/tiny-llama"


@pytest.fixture
def hub(tiny_dir: Path):
    with stand_in_hub() as hub:
        hub.add_repo(REPO, tiny_dir)
        yield hub


@pytest.fixture
def storage(settings, hub, tmp_path: Path) -> Path:
    settings.HF_ENDPOINT = hub.url
    settings.MODEL_STORAGE_DIR = tmp_path / "models"
    return settings.MODEL_STORAGE_DIR


def pull(*args: str) -> str:
    out = io.StringIO()
    call_command("pull", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_pull_lands_in_the_catalog(db, hub, storage, tiny_dir, engine):
    from tests.support.helpers import run_job

    assert "pulled test-org/tiny-llama as tiny-llama" in pull(REPO)
    entry = CatalogModel.objects.get(public_id="tiny-llama")
    folder = Path(entry.location)
    assert folder == storage / "tiny-llama"
    assert entry.source == CatalogModel.Source.LOCAL and entry.display_name == REPO
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        assert sha256(folder / name) == sha256(tiny_dir / name)
    assert not (storage / ".pulls" / "tiny-llama").exists()
    for made in (storage, storage / ".pulls"):  # made by the pull: owner-only, as var/ is
        assert made.stat().st_mode & 0o777 == 0o700, made
    # The weights came through the CDN redirect, as on the hub.
    assert any(path.startswith("/cdn/") for _, path, _ in hub.requests)
    _, done = run_job(engine, entry.spec(), "Hello")
    assert done.finish_reason in ("stop", "length")


def test_a_dropped_download_resumes_with_range(db, hub, storage, tiny_dir):
    hub.drop["model.safetensors"] = RETRIES + 1  # more drops than one pull retries
    with pytest.raises(CommandError, match=r"connection dropped .* pull again to resume"):
        pull(REPO, "--id", "tiny")
    partial = storage / ".pulls" / "tiny" / "model.safetensors.part"
    kept = partial.stat().st_size
    assert 0 < kept < (tiny_dir / "model.safetensors").stat().st_size
    assert (storage / ".pulls" / "tiny" / "config.json").is_file()  # finished files stay
    hub.requests.clear()
    pull(REPO, "--id", "tiny")
    ranges = [header for _, path, header in hub.requests if path.startswith("/cdn/")]
    assert f"bytes={kept}-" in ranges
    # config.json was not fetched again
    assert not any(path.endswith("/config.json") for _, path, _ in hub.requests)
    weights = Path(CatalogModel.objects.get(public_id="tiny").location) / "model.safetensors"
    assert sha256(weights) == sha256(tiny_dir / "model.safetensors")


def test_a_corrupted_file_is_refused(db, hub, storage, tiny_dir):
    weights = (tiny_dir / "model.safetensors").read_bytes()
    hub.corrupt["model.safetensors"] = weights[:-1] + bytes([weights[-1] ^ 1])
    with pytest.raises(CommandError, match=r"model\.safetensors does not match the hub's checksum"):
        pull(REPO, "--id", "tiny")
    assert not CatalogModel.objects.filter(public_id="tiny").exists()
    assert not list((storage / ".pulls" / "tiny").glob("model.safetensors*"))


def test_not_enough_disk_is_refused_before_downloading(db, hub, storage, monkeypatch):
    monkeypatch.setattr(hub_module, "free_bytes", lambda folder: 10 * 2**20)
    with pytest.raises(CommandError, match=r"not enough disk space in .*: the pull needs"):
        pull(REPO, "--id", "tiny")
    assert not any("/resolve/" in path for _, path, _ in hub.requests)


def test_a_cancelled_pull_says_so_and_keeps_its_partial(db, hub, storage, monkeypatch):
    from catalog.management.commands import pull as command

    def interrupted(self, count: int) -> None:
        self.done += count
        if self.done > 4 * 2**20:
            raise KeyboardInterrupt  # as Ctrl-C or the admin's SIGTERM

    monkeypatch.setattr(command.Progress, "advance", interrupted)
    job = HubPull.objects.create(repo=REPO, model_id="tiny")
    with pytest.raises(CommandError, match="cancelled"):
        pull(REPO, "--id", "tiny", "--job", str(job.pk))
    job.refresh_from_db()
    assert job.status == HubPull.Status.CANCELLED and job.finished is not None
    assert (storage / ".pulls" / "tiny" / "model.safetensors.part").stat().st_size > 0
    assert not CatalogModel.objects.filter(public_id="tiny").exists()


def test_the_admin_starts_watches_and_cancels_a_pull(admin_client, monkeypatch, settings, tmp_path):

    settings.VAR_DIR = tmp_path
    started = []

    class Started:
        pid = None

    def popen(command, **kwargs):
        started.append(command)
        return Started()

    monkeypatch.setattr(background.subprocess, "Popen", popen)
    response = admin_client.post(
        "/admin/catalog/hubpull/add/",
        {"repo": REPO, "revision": "main", "filename": "", "model_id": "tiny"},
    )
    assert response.status_code == 302
    job = HubPull.objects.get()
    (command,) = started
    assert command[2:] == ["pull", REPO, "--revision", "main", "--id", "tiny", "--job", str(job.pk)]
    # A running pull: its process gets SIGTERM from the list's cancel button.
    monkeypatch.undo()
    sleeper = subprocess.Popen(["sleep", "30"])
    HubPull.objects.filter(pk=job.pk).update(status="running", pid=sleeper.pid, bytes_total=2**20)
    listing = admin_client.get("/admin/catalog/hubpull/").content.decode()
    assert 'http-equiv="refresh"' in listing and "0.0 / 1.0 MiB" in listing
    assert f'formaction="/admin/catalog/hubpull/{job.pk}/cancel/"' in listing
    admin_client.post(f"/admin/catalog/hubpull/{job.pk}/cancel/")
    assert sleeper.wait(timeout=5) == -signal.SIGTERM
    # Its process gone (a reboot), the row is marked cancelled by the admin itself.
    admin_client.post(f"/admin/catalog/hubpull/{job.pk}/cancel/")
    job.refresh_from_db()
    assert job.status == HubPull.Status.CANCELLED


def test_a_gguf_repo_needs_a_file_then_is_imported(db, hub, storage, demo_gguf):
    hub.add_repo("test-org/smol-gguf", demo_gguf.parent, [demo_gguf.name])
    with pytest.raises(CommandError, match=rf"holds GGUF files: .*{demo_gguf.name}"):
        pull("test-org/smol-gguf")
    pull(f"test-org/smol-gguf:{demo_gguf.name}", "--id", "smol")
    entry = CatalogModel.objects.get(public_id="smol")
    assert entry.source == CatalogModel.Source.GGUF
    assert entry.display_name == f"test-org/smol-gguf:{demo_gguf.name}"  # the hub's name
    assert (Path(entry.location) / "config.json").is_file()
    assert not (storage / ".pulls" / "smol").exists()  # the GGUF is not kept beside it


def test_huggingface_hub_reads_the_stand_in(hub, tiny_dir, tmp_path, monkeypatch):
    """The stand-in speaks what huggingface_hub asks (what mlx-lm's first load of a repo id
    does): so the pull's tests are tests against the hub's protocol."""
    from huggingface_hub import HfApi, constants, hf_hub_download, snapshot_download

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    one = hf_hub_download(REPO, "model.safetensors", endpoint=hub.url, cache_dir=tmp_path / "a")
    assert sha256(Path(one)) == sha256(tiny_dir / "model.safetensors")
    folder = Path(snapshot_download(REPO, endpoint=hub.url, cache_dir=tmp_path / "b"))
    assert sha256(folder / "tokenizer.json") == sha256(tiny_dir / "tokenizer.json")
    info = HfApi(endpoint=hub.url).model_info(REPO, files_metadata=True)
    weights = next(s for s in info.siblings if s.rfilename == "model.safetensors")
    assert weights.lfs.sha256 == sha256(tiny_dir / "model.safetensors")


@pytest.mark.database_independent  # its server has its own database
def test_a_pulled_model_serves(hub, tmp_path):
    setup = ("pull", REPO, "--id", "pulled")
    with live_server(tmp_path / "var", setup, HF_ENDPOINT=hub.url) as server:
        body = {"model": "pulled", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
        response = httpx.post(f"{server.api}/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    assert response.json()["model"] == "pulled"


def _listing(*names: str) -> Listing:
    return Listing("o/r", "c", [RepoFile(name, 1, None, None) for name in names])


@pytest.mark.parametrize(
    ("names", "tag", "chosen"),
    [
        (["m.Q4_K_S.gguf", "m.Q4_K_M.gguf"], "q4_k_m", "m.Q4_K_M.gguf"),  # any case
        (["m-Q4_K_M.gguf", "m-Q8_0.gguf"], None, "m-Q4_K_M.gguf"),  # Ollama's default
        (["m-Q8_0.gguf"], None, "m-Q8_0.gguf"),  # no Q4_K_M: the only file
        (["m-Q8_0.gguf", "m-Q4_0.gguf", "mmproj-m-Q4_K_M.gguf"], None, "m-Q4_0.gguf"),
        (["m_IQ4_XS.gguf", "m_Q4_XS.gguf"], "Q4_XS", "m_Q4_XS.gguf"),  # IQ4_XS is not Q4_XS
        (["config.json", "model.safetensors"], None, None),  # an MLX repo: taken whole
    ],
)
def test_a_quantization_tag_picks_its_gguf_file(names, tag, chosen):
    found = gguf_for_quantization(_listing(*names), tag)
    assert (found.name if found else None) == chosen


@pytest.mark.parametrize(
    ("names", "tag", "message"),
    [
        (["m.Q4_K_M.gguf", "m.Q4_K_S.gguf"], "Q4_K", "no GGUF file for Q4_K; its GGUF files"),
        (["a-Q4_0.gguf", "b-Q4_0.gguf"], "Q4_0", "more than one file for Q4_0"),
        (["a-Q2_K.gguf", "a-Q3_K_M.gguf"], None, "no GGUF file for Q4_K_M"),
        (["model.safetensors"], "Q4_0", "no GGUF files for the tag"),
    ],
)
def test_a_tag_without_one_file_is_refused(names, tag, message):
    with pytest.raises(HubError, match=message):
        gguf_for_quantization(_listing(*names), tag)
