"""This process's history for the dashboard (series.py) and the thread that samples it, with
the process's resident memory, which the engine's health does not carry."""

from __future__ import annotations

import os
import subprocess
import sys

from inference.observability.series import Sampler, Series
from inference.runtime import current_health

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """Resident memory of this process now: /proc on Linux, ps elsewhere (macOS has no /proc;
    getrusage gives only the peak)."""
    if sys.platform.startswith("linux"):
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * PAGE
    out = subprocess.run(
        ["ps", "-o", "rss=", "-p", str(os.getpid())], capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip()) * 1024  # ps says KiB


history = Series()
sampler = Sampler(history, current_health, rss_bytes)
