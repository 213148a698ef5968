"""What timing the compute formats at load chose (compute_format.measure), kept across restarts.

Timing both formats takes seconds to tens of seconds at real widths, at every load: the first
request after `manage.py serve` waited for it. A verdict holds for the weights, the machine
and the software it was measured with, so its key names all three: other weights (replaced
files), another CPU, core count, MLX, BLAS, kernels build or kernel thread count measure
again. Kept in memory, and in a JSON file when the engine names one (VAR_DIR's by default).
Nothing here fails a load: a file that cannot be read is set aside (or ignored) with a
warning, one that cannot be written costs a timing at the next start.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import platform
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import mlx.core as mx

from inference import blas
from inference.engine.cpu import kernel_status
from inference.engine.cpu.ext import ext
from inference.engine.weight_files import weight_files

log = logging.getLogger(__name__)

VERSION = 1
FORMATS = ("stored", "float32")  # what measure() chooses between


@dataclass(frozen=True)
class Verdict:
    format: str  # one of FORMATS
    reason: str  # what was measured
    measured_at: float  # seconds since the epoch

    @classmethod
    def read(cls, value: dict) -> Verdict:
        verdict = cls(**value)
        if verdict.format not in FORMATS or not isinstance(verdict.reason, str):
            raise ValueError(f"not a verdict: {value!r}")
        if not isinstance(verdict.measured_at, int | float):
            raise ValueError(f"not a time: {verdict.measured_at!r}")
        return verdict


def weights_key(location: str, from_hub: bool = False, role: str = "model") -> str:
    """The model's location and a digest of its files' names, sizes and times."""
    files = json.dumps(weight_files(location, from_hub))
    return f"{role}:{location}:{hashlib.sha256(files.encode()).hexdigest()[:16]}"


def machine_key() -> str:
    """The CPU, its cores, and the software that computes: what a timing depends on."""
    build = ""
    if ext is not None and getattr(ext, "__file__", None):
        with contextlib.suppress(OSError):
            stat = Path(ext.__file__).stat()
            build = f"{stat.st_size}:{stat.st_mtime_ns}"
    parts = [
        _cpu_model(),
        f"cores={os.cpu_count()}",
        f"mlx={mx.__version__}",
        f"blas={blas.status().library}",
        f"kernels={kernel_status().describe()}@{build}",
    ]
    return "|".join(parts)


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


class Verdicts:
    """Verdicts by key (weights_key + machine_key), in memory and in `path` when given."""

    def __init__(self, path: str = "") -> None:
        self.path = Path(path).expanduser() if path else None
        self._lock = threading.Lock()
        self._memory: dict[str, Verdict] = self._read(set_aside=True)

    def get(self, weights: str) -> Verdict | None:
        with self._lock:
            return self._memory.get(self._key(weights))

    def put(self, weights: str, verdict: Verdict) -> None:
        with self._lock:
            self._memory[self._key(weights)] = verdict
            if self.path is not None:
                self._write()

    @staticmethod
    def _key(weights: str) -> str:
        return f"{weights}|{machine_key()}"

    def _read(self, set_aside: bool) -> dict[str, Verdict]:
        if self.path is None or not self.path.exists():
            return {}
        try:
            document = json.loads(self.path.read_text())
            if document.get("version") != VERSION:
                raise ValueError(f"version {document.get('version')!r}, not {VERSION}")
            return {key: Verdict.read(value) for key, value in document["verdicts"].items()}
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as error:
            if set_aside:
                self._set_aside(error)
            return {}

    def _set_aside(self, error: Exception) -> None:
        aside = self.path.with_name(f"{self.path.name}.unreadable")
        try:
            self.path.replace(aside)
        except OSError as failure:  # read-only, or another process set it aside first
            log.warning(
                "compute format verdicts in %s unreadable (%s): %s", self.path, error, failure
            )
            return
        log.warning(
            "compute format verdicts in %s unreadable (%s): set aside as %s; "
            "models are timed again",
            self.path,
            error,
            aside.name,
        )

    def _write(self) -> None:
        """Whole or not at all: written beside and renamed over, under a lock on a file beside
        it, merged with what other processes (replicas, an earlier run) wrote since."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with _locked(self.path.with_name(f".{self.path.name}.lock")):
                self._memory = self._read(set_aside=False) | self._memory
                document = {
                    "version": VERSION,
                    "verdicts": {key: asdict(value) for key, value in self._memory.items()},
                }
                _replace_whole(self.path, json.dumps(document, indent=1))
        except OSError as error:
            log.warning("compute format verdicts not saved to %s: %s", self.path, error)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with os.fdopen(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _replace_whole(path: Path, text: str) -> None:
    handle, staging = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w") as out:  # mkstemp's file is owner-only
            out.write(text)
        os.replace(staging, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(staging)
        raise
