"""A background job's log read for people: progress bars' carriage-return redraws folded to
their last state, and a failure said in plain words (the exception's message, not the
traceback) for the admin's lists and pages."""

from __future__ import annotations

import re
from pathlib import Path

from catalog.processes import LOST

# The most of a log the admin reads or shows: its end, where a failure is.
TAIL_BYTES = 1 << 20

# "CommandError: ...", "ValueError: ...", "struct.error: ...": the line a traceback ends with.
EXCEPTION_LINE = re.compile(
    r"^(?P<kind>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|error))"
    r"(?::\s*(?P<message>.*))?$"
)
# What only a traceback says: its header, frames, their code and the carets under it.
TRACEBACK_LINE = re.compile(r"^(Traceback \(most recent call last\):|\s+.*|[\s~^]+)$")
# What the commands write when the reason is in the log.
SEE_THE_LOG = "see the log"


def readable_log(log: Path) -> str:
    """The log's last TAIL_BYTES, each line as it last looked (tqdm redraws with \\r)."""
    with log.open("rb") as handle:
        size = handle.seek(0, 2)
        handle.seek(max(0, size - TAIL_BYTES))
        text = handle.read().decode("utf-8", errors="replace")
    lines = (line.rstrip("\r").rsplit("\r", 1)[-1] for line in text.split("\n"))
    return "\n".join(lines)


def log_failure(text: str) -> str | None:
    """The failure a log ends with, in plain words: the last exception's message (with its
    kind where that says something), else the last line that is not part of a traceback."""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        found = EXCEPTION_LINE.match(line)
        if found:
            return plain_exception(found["kind"], found["message"] or "")
    for line in reversed(lines):
        if not TRACEBACK_LINE.match(line):
            return line.strip()
    return None


def plain_exception(kind: str, message: str) -> str:
    short = kind.rsplit(".", 1)[-1]
    if short == "CommandError":  # the command's own words
        return message or "the command failed"
    if short == "KeyboardInterrupt":  # SIGTERM unwinds as one (management/options.py)
        return message or "stopped"
    label = kind if short.islower() else short  # struct.error, not error
    return f"{message} ({label})" if message else label


def failure_text(message: str, log: Path) -> str:
    """What a failed job says to the admin: its own message when that is the reason, else
    (the reason is in the log, or the process died) what its log ends with."""
    if message and not message.endswith(SEE_THE_LOG) and message != LOST:
        return message
    found = log_failure(readable_log(log)) if log.is_file() else None
    if found is None:
        return message or "failed, and its log says nothing"
    return f"{LOST}: {found}" if message == LOST else found
