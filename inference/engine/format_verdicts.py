"""What timing the compute formats at load chose (compute_format.measure), kept across restarts.

Timing both formats takes seconds to tens of seconds at real widths, at every load: the first
request after `manage.py serve` waited for it. A verdict holds for the weights, the machine
and the software it was measured with, so its key names all three: other weights (replaced
files), another CPU, core count, MLX, BLAS, kernels build or kernel thread count measure
again. Kept in memory, and in a JSON file when the engine names one (VAR_DIR's by default);
a file that cannot be read is set aside with a warning, never an error at load.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

import mlx.core as mx

from inference import blas
from inference.engine.cpu import kernel_status
from inference.engine.cpu.ext import ext

log = logging.getLogger(__name__)

VERSION = 1
# The files whose sizes and times identify a model folder's weights.
WEIGHT_SUFFIXES = (".safetensors", ".json", ".gguf")


@dataclass(frozen=True)
class Verdict:
    format: str  # "stored" or a dtype name
    reason: str  # what was measured
    measured_at: float  # seconds since the epoch


def weights_key(location: str, role: str = "model") -> str:
    """The folder (or file) resolved, and a digest of its weight files' sizes and times."""
    path = Path(location).expanduser().resolve()
    files = sorted(path.iterdir()) if path.is_dir() else [path]  # none if it is not there
    digest = hashlib.sha256()
    for file in files:
        if file.suffix in WEIGHT_SUFFIXES and file.is_file():
            stat = file.stat()
            digest.update(f"{file.name}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return f"{role}:{path}:{digest.hexdigest()[:16]}"


def machine_key() -> str:
    """The CPU, its cores, and the software that computes: what a timing depends on."""
    kernels = kernel_status()
    build = ""
    if ext is not None and getattr(ext, "__file__", None):
        stat = Path(ext.__file__).stat()
        build = f"{stat.st_size}:{stat.st_mtime_ns}"
    parts = [
        _cpu_model(),
        f"cores={os.cpu_count()}",
        f"mlx={mx.__version__}",
        f"blas={blas.status().library}",
        f"kernels={kernels.describe()}@{build}",
    ]
    return "|".join(parts)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
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
            return {key: Verdict(**value) for key, value in document["verdicts"].items()}
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as error:
            if not set_aside:
                return {}
            aside = self.path.with_name(f"{self.path.name}.unreadable")
            log.warning(
                "compute format verdicts in %s unreadable (%s): set aside as %s; "
                "models are timed again",
                self.path,
                error,
                aside.name,
            )
            self.path.replace(aside)
            return {}

    def _write(self) -> None:
        """Whole or not at all: written beside and renamed over (another process may read it)."""
        # Another process (a replica, an earlier run) may have added its own since.
        self._memory = self._read(set_aside=False) | self._memory
        document = {
            "version": VERSION,
            "verdicts": {key: asdict(value) for key, value in self._memory.items()},
        }
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle, staging = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
            with os.fdopen(handle, "w") as out:  # mkstemp's file is owner-only
                json.dump(document, out, indent=1)
            os.replace(staging, self.path)
        except OSError as error:  # a verdict not kept only costs a timing at the next start
            log.warning("compute format verdicts not saved to %s: %s", self.path, error)
