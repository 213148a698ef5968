"""manage.py commands the admin and the API start and leave running (GGUF imports, hub pulls):
each in its own session, so that it outlives a server restart, its output in a log of its own
under VAR_DIR."""

from __future__ import annotations

import subprocess
from pathlib import Path

from django.conf import settings
from django.db import models

# Each kind of job's folder of logs under VAR_DIR, by model name.
LOG_FOLDERS = {"ggufimport": "imports", "hubpull": "pulls"}


def job_log_path(job: models.Model) -> Path:
    """Where the job's command writes its output (the latest attempt's)."""
    return settings.VAR_DIR / LOG_FOLDERS[job._meta.model_name] / f"{job.pk}.log"


def start_command(command: list[str], log_path: Path) -> subprocess.Popen:
    log_path.parent.mkdir(exist_ok=True)
    with log_path.open("w") as out:
        return subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=settings.BASE_DIR,
            start_new_session=True,
        )
