"""Whether a background import's process (`import_gguf --job`, `pull --job`) still runs, so
that a row it left "running" when it was killed (a reboot, the OOM killer, kill -9) is marked
failed instead of blocking its model id forever."""

from __future__ import annotations

import os

LOST = "the import process ended without finishing"


def process_alive(pid: int) -> bool:
    try:
        # Our own child (the admin started it from this process) lingers as a zombie until it
        # is waited for, and a zombie still answers kill(0): reap it here first.
        ended, _ = os.waitpid(pid, os.WNOHANG)
        if ended == pid:
            return False
    except ChildProcessError:
        pass  # not our child: another server process or an earlier run started it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process has that pid now; it is not ours to judge
    return True
