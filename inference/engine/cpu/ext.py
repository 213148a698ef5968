"""The cpu_kernels extension (built from kernels/), imported once: None where it did not build
(`IMPORT_ERROR` says why) and nothing is swapped in. Imported here rather than in each call,
since the layers call it a few hundred times per decode step."""

from __future__ import annotations

from types import ModuleType

ext: ModuleType | None
IMPORT_ERROR: ImportError | None = None
try:
    import cpu_kernels as ext
except ImportError as exc:  # no compiler, or an MLX it does not match
    ext = None
    IMPORT_ERROR = exc
