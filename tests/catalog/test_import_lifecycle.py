"""A GGUF import's life beyond the happy path: killed, it is marked failed and its id may be
imported again; its upload is deleted whatever the outcome; an odd file name is a path."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command

from catalog.models import GGUFImport
from catalog.processes import LOST

ADD = "/admin/catalog/ggufimport/add/"
REAL_POPEN = subprocess.Popen  # the fixture below replaces the module's


def until_zombie(pid: int, timeout: float = 10) -> None:
    """Until a killed, unreaped child is dead (SIGKILL lands a moment later on a busy machine)."""
    deadline = time.monotonic() + timeout
    stat = Path(f"/proc/{pid}/stat")
    while stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, f"process {pid} outlived SIGKILL"
        time.sleep(0.01)


def run(command: list[str]) -> None:
    call_command(*command[2:], stdout=io.StringIO(), stderr=io.StringIO())


def test_a_killed_import_is_marked_failed_and_its_id_imports_again(admin_client, started):
    victim = REAL_POPEN([sys.executable, "-c", "import time; time.sleep(60)"])
    job = GGUFImport.objects.create(
        model_id="again", source_path=__file__, status=GGUFImport.Status.RUNNING, pid=victim.pid
    )
    form = {"model_id": "again", "source_path": __file__}
    refused = admin_client.post(ADD, form)
    assert b"An import of this id is already running." in refused.content

    victim.send_signal(signal.SIGKILL)  # not waited for: a zombie, as the admin's child is
    until_zombie(victim.pid)
    listing = admin_client.get("/admin/catalog/ggufimport/").content.decode()
    job.refresh_from_db()
    assert (job.status, job.message) == (GGUFImport.Status.FAILED, LOST)
    assert LOST in listing and 'http-equiv="refresh"' not in listing
    assert admin_client.post(ADD, form).status_code == 302
    assert len(started) == 1


def test_an_upload_is_deleted_after_its_import(admin_client, started):
    upload = SimpleUploadedFile("broken.gguf", b"GGUF" + b"\0" * 64)
    assert admin_client.post(ADD, {"model_id": "broken", "upload": upload}).status_code == 302
    job = GGUFImport.objects.get()
    assert job.upload and (saved := job.upload.path) and Path(saved).read_bytes()[:4] == b"GGUF"
    with pytest.raises(CommandError):
        run(started[0])
    job.refresh_from_db()
    assert job.status == GGUFImport.Status.FAILED
    assert not Path(saved).exists()


def test_a_file_named_like_an_option_imports(
    admin_client, started, demo_gguf, monkeypatch, tmp_path
):
    (tmp_path / "-x.gguf").symlink_to(demo_gguf)
    monkeypatch.chdir(tmp_path)  # a relative path, as an operator may type it
    assert (
        admin_client.post(ADD, {"model_id": "dashed", "source_path": "-x.gguf"}).status_code == 302
    )
    (command,) = started
    assert command[-2:] == ["--", "-x.gguf"]
    run(command)
    job = GGUFImport.objects.get()
    assert job.status == GGUFImport.Status.DONE and job.imported.public_id == "dashed"
