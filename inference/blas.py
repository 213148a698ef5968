"""An optimized BLAS under MLX's CPU backend on Linux, loaded before MLX is imported.

The mlx-cpu wheel links the netlib reference BLAS: a 1024x1024 float32 matmul takes ~0.6 s on our
machines, ~0.014 s with OpenBLAS. MLX resolves `cblas_sgemm` and friends through the global
symbol scope first, so an OpenBLAS loaded with RTLD_GLOBAL before `import mlx` wins. Nothing here
imports MLX; settings.py calls preload() before anything else can.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os
import sys
from dataclasses import dataclass

# Debian/Ubuntu's libopenblas0-pthread, then whatever the linker finds.
SYSTEM_OPENBLAS = (
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
)


@dataclass(frozen=True)
class BlasStatus:
    library: str | None  # the file loaded, or None when MLX keeps its own BLAS
    reason: str


_status = BlasStatus(None, "not attempted")


def status() -> BlasStatus:
    return _status


def preload(enabled: bool = True, library: str | None = None) -> BlasStatus:
    global _status
    _status = _preload(enabled, library)
    return _status


def _preload(enabled: bool, library: str | None) -> BlasStatus:
    if not enabled:
        return BlasStatus(None, "disabled by BLAS_PRELOAD=false")
    if sys.platform != "linux":
        return BlasStatus(None, "not Linux: MLX uses the platform's own accelerated libraries")
    if importlib.util.find_spec("mlx_cuda") is not None:
        return BlasStatus(None, "the CUDA backend is installed")
    if "mlx.core" in sys.modules:
        return BlasStatus(None, "MLX was imported first; too late to swap its BLAS")
    path = library or find_openblas()
    if path is None:
        return BlasStatus(
            None,
            "no OpenBLAS found: MLX keeps its reference BLAS (install Debian's "
            "libopenblas0-pthread, or set BLAS_LIBRARY)",
        )
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        return BlasStatus(None, f"could not load {path}: {exc}")
    return BlasStatus(path, "loaded before MLX")


def find_openblas() -> str | None:
    for path in SYSTEM_OPENBLAS:
        if os.path.exists(path):
            return path
    return ctypes.util.find_library("openblas")


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def global_provider(symbol: str = "cblas_sgemm") -> str | None:
    """The file whose definition of `symbol` the global scope (and so MLX) binds to."""
    try:
        address = ctypes.cast(getattr(ctypes.CDLL(None), symbol), ctypes.c_void_p).value
    except AttributeError:
        return None
    info = _DlInfo()
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    if not libc.dladdr(ctypes.c_void_p(address), ctypes.byref(info)):
        return None
    return os.path.realpath(info.dli_fname.decode())
