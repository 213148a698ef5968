"""A failed background job in the admin: its failure in plain words on the list and its page
(the exception's message, not the traceback its log holds), its log one click away, and Retry,
which starts the same job again through the same path and is refused for a job not failed."""

from __future__ import annotations

import shutil
import traceback
from pathlib import Path

from django.core.management import CommandError, call_command

from catalog.background import job_log_path
from catalog.job_logs import log_failure, readable_log
from catalog.models import GGUFImport, HubPull

IMPORTS = "/admin/catalog/ggufimport/"
PULLS = "/admin/catalog/hubpull/"


def run_logged(command: list[str], log: Path) -> None:
    """The command run as its process would run it: its output and, when it fails, what
    manage.py prints (a CommandError's message, else the traceback) land in its log."""
    with log.open("w") as out:
        try:
            call_command(*command[2:], stdout=out, stderr=out)
        except CommandError as exc:
            out.write(f"CommandError: {exc}\n")
        except Exception:
            traceback.print_exc(file=out)


def truncated(gguf: Path, at: Path) -> Path:
    """The demo GGUF cut short: its header reads, its tensors do not."""
    at.write_bytes(gguf.read_bytes()[:3_000_000])
    return at


def test_a_failed_import_says_why_and_retry_imports_it(admin_client, started, demo_gguf, tmp_path):
    gguf = truncated(demo_gguf, tmp_path / "smol.gguf")
    added = admin_client.post(IMPORTS + "add/", {"model_id": "smol", "source_path": str(gguf)})
    assert added.status_code == 302
    job = GGUFImport.objects.get()
    run_logged(started[0], job_log_path(job))
    job.refresh_from_db()
    assert job.status == GGUFImport.Status.FAILED
    # Said where the file is read, in plain words, not as a reshape error from deep inside.
    assert "the file is cut short: its tensors need" in job.message
    assert "(an incomplete download or copy?)" in job.message
    assert "CommandError: cannot import smol.gguf" in job_log_path(job).read_text()

    listing = admin_client.get(IMPORTS).text
    assert "the file is cut short" in listing
    assert "Traceback" not in listing and "see the log" not in listing
    assert f'formaction="{IMPORTS}{job.pk}/retry/"' in listing and ">Retry</button>" in listing
    page = admin_client.get(f"{IMPORTS}{job.pk}/change/").text
    assert 'id="job-failure"' in page and "the file is cut short" in page
    assert f'<form method="post" action="{IMPORTS}{job.pk}/retry/"' in page
    log = admin_client.get(f"{IMPORTS}{job.pk}/log/")
    assert log["Content-Type"] == "text/plain; charset=utf-8"
    assert "cannot import smol.gguf" in log.text

    shutil.copyfile(demo_gguf, gguf)  # the file made whole, then Retry
    retried = admin_client.post(f"{IMPORTS}{job.pk}/retry/", follow=True)
    assert "Importing smol in the background." in retried.text
    assert started[1] == started[0]  # the same command, by the same path
    job.refresh_from_db()
    assert (job.status, job.message, job.finished) == (GGUFImport.Status.QUEUED, "", None)
    run_logged(started[1], job_log_path(job))
    job.refresh_from_db()
    assert job.status == GGUFImport.Status.DONE and job.imported.public_id == "smol"
    assert 'id="job-failure"' not in admin_client.get(f"{IMPORTS}{job.pk}/change/").text

    again = admin_client.post(f"{IMPORTS}{job.pk}/retry/", follow=True)
    assert "Not retried: smol is done, not failed." in again.text
    assert len(started) == 2


def test_a_command_error_is_shown_as_the_command_said_it(admin_client, started, tmp_path):
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"definitely not a model")
    admin_client.post(IMPORTS + "add/", {"model_id": "bogus", "source_path": str(bogus)})
    job = GGUFImport.objects.get()
    run_logged(started[0], job_log_path(job))
    job.refresh_from_db()
    assert job.message.startswith("cannot import bogus.gguf: ")
    listing = admin_client.get(IMPORTS).text
    assert job.message in listing


def test_retry_refuses_what_cannot_run_again(admin_client, started, tmp_path):
    gone = tmp_path / "gone.gguf"
    gone.write_bytes(b"GGUF")
    admin_client.post(IMPORTS + "add/", {"model_id": "gone", "source_path": str(gone)})
    job = GGUFImport.objects.get()
    GGUFImport.objects.filter(pk=job.pk).update(status=GGUFImport.Status.FAILED, message="x")
    gone.unlink()
    refused = admin_client.post(f"{IMPORTS}{job.pk}/retry/", follow=True)
    assert "Not retried: There is no such file on the server." in refused.text
    assert admin_client.get(f"{IMPORTS}{job.pk}/retry/").status_code == 302  # GET starts nothing
    uploaded = GGUFImport.objects.create(
        model_id="up", upload="gguf-uploads/deleted.gguf", status=GGUFImport.Status.FAILED
    )
    refused = admin_client.post(f"{IMPORTS}{uploaded.pk}/retry/", follow=True)
    assert "uploaded file was deleted after the failed attempt" in refused.text
    assert len(started) == 1  # only the first add


def test_a_failed_pull_retries_and_a_cancelled_one_is_not_retried(admin_client, started):
    failed = HubPull.objects.create(
        repo="owner/repo", model_id="pulled", status=HubPull.Status.FAILED, message="no space"
    )
    cancelled = HubPull.objects.create(
        repo="owner/other", model_id="other", status=HubPull.Status.CANCELLED
    )
    listing = admin_client.get(PULLS).text
    assert f'formaction="{PULLS}{failed.pk}/retry/"' in listing
    assert f"{PULLS}{cancelled.pk}/retry/" not in listing
    retried = admin_client.post(f"{PULLS}{failed.pk}/retry/", follow=True)
    assert "Pulling owner/repo as pulled again." in retried.text
    (command,) = started
    assert command[2:4] == ["pull", "owner/repo"] and command[-2:] == ["--job", str(failed.pk)]
    failed.refresh_from_db()
    assert failed.status == HubPull.Status.QUEUED and failed.message == ""
    refused = admin_client.post(f"{PULLS}{cancelled.pk}/retry/", follow=True)
    assert "Not retried: other is cancelled, not failed." in refused.text
    assert len(started) == 1


def test_a_job_log_is_for_staff_only(client, admin_client, started):
    job = HubPull.objects.create(repo="owner/repo", model_id="p", status=HubPull.Status.FAILED)
    log = job_log_path(job)
    log.parent.mkdir(exist_ok=True)
    log.write_text("downloading\nCommandError: the hub says 404 for owner/repo\n")
    assert client.get(f"{PULLS}{job.pk}/log/").status_code == 302  # to the login
    assert "the hub says 404" in admin_client.get(f"{PULLS}{job.pk}/log/").text
    assert "the hub says 404 for owner/repo" in admin_client.get(PULLS).text
    missing = HubPull.objects.create(repo="owner/x", model_id="x", status=HubPull.Status.FAILED)
    assert admin_client.get(f"{PULLS}{missing.pk}/log/").status_code == 404


def test_a_log_read_for_people(tmp_path):
    log = tmp_path / "1.log"
    log.write_text("importing:  10%|#\rimporting:  50%|#####\rimporting:  90%|#########\n")
    assert readable_log(log) == "importing:  90%|#########\n"
    tail = 'Traceback (most recent call last):\n  File "x.py", line 1\n    f()\n    ^^^\n'
    assert log_failure(tail + "struct.error: unpack requires a buffer of 8 bytes\n") == (
        "unpack requires a buffer of 8 bytes (struct.error)"
    )
    assert log_failure("KeyboardInterrupt: stopped by signal 15\n") == "stopped by signal 15"
    assert log_failure("downloading\nKilled\n") == "Killed"
    assert log_failure("") is None
