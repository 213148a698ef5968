"""Whether this process computes with the cpu_kernels extension, decided once and logged."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import mlx.core as mx

from inference.engine.cpu.ext import IMPORT_ERROR, ext

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KernelStatus:
    available: bool
    isa: str | None  # avx512, avx2 or generic
    threads: int
    reason: str
    # The matmul's paths under that set: decode's integer one (direct: avx512vnni, avx2 or
    # none, floats) and the one for many rows (prompts: "int8 avx512vnni" tiles, "float
    # panels avx2" where AVX2's integer tiles are slower, or "float").
    direct: str = "none"
    prompts: str = "float"

    @property
    def q6k(self) -> str | None:
        """Why GGUF's Q6_K weights cannot stay 6-bit in the kernels here (None: they can):
        their path needs AVX-512 VNNI (kernels/src/qmm.cpp says why)."""
        if not self.available:
            return f"the CPU kernels are off ({self.reason})"
        if self.direct != "avx512vnni":
            return f"the kernels' 6-bit path needs AVX-512 VNNI, not {self.direct}"
        return None

    def describe(self) -> str:
        if self.available:
            plural = "s" if self.threads != 1 else ""
            return (
                f"{self.isa}, {self.threads} thread{plural}, int8 decode {self.direct}, "
                f"prompts {self.prompts}"
            )
        return f"off: {self.reason}"


_lock = threading.Lock()
_status: KernelStatus | None = None
_wanted = {"enabled": True, "threads": 0}
_suspended: list[bool] = []  # non-empty inside suspended()


def configure(enabled: bool = True, threads: int = 0) -> None:
    """Before the first kernel_status(): the CPU_KERNELS and CPU_KERNEL_THREADS settings."""
    global _status
    with _lock:
        _wanted.update(enabled=enabled, threads=threads)
        _status = None


@contextmanager
def suspended() -> Iterator[None]:
    """MLX's own ops meanwhile, everywhere the kernels are routed in: they have no gradients,
    so what differentiates a model (a test training one) runs without them."""
    _suspended.append(True)
    try:
        yield
    finally:
        _suspended.pop()


def in_use() -> bool:
    """Whether the kernels are decided on and usable (the hooks ask on every call: no lock)."""
    status = _status
    return status is not None and status.available and not _suspended


def kernel_status() -> KernelStatus:
    global _status
    with _lock:
        if _status is None:
            _status = _decide(**_wanted)
            if _status.available:
                log.info("CPU kernels: %s", _status.describe())
            elif _status.reason == ON_GPU:
                log.info("CPU kernels %s", ON_GPU)
            else:
                log.warning("CPU kernels %s; quantized models use MLX's own path", _status.reason)
        return _status


ON_GPU = "not needed on a GPU backend"


def _off(reason: str) -> KernelStatus:
    return KernelStatus(False, None, 0, reason)


def _decide(enabled: bool, threads: int) -> KernelStatus:
    if not enabled:
        return _off("turned off by CPU_KERNELS=false")
    if mx.default_device() != mx.cpu:
        return _off(ON_GPU)
    if ext is None:
        return _off(
            f"not built ({IMPORT_ERROR}); `make` builds kernels/ with cmake and a C++ compiler"
        )
    if mx.__version__ != ext.MLX_VERSION:
        return _off(
            f"built for MLX {ext.MLX_VERSION}, running {mx.__version__}: rebuild kernels/ "
            "(make does)"
        )
    ext.set_threads(threads)
    problem = _self_test(ext)
    if problem:
        return _off(f"failed their self-test ({problem})")
    return KernelStatus(True, ext.isa(), ext.threads(), "ready", ext.direct_isa(), prompt_path(ext))


def prompt_path(ck) -> str:
    """What auto runs many rows with under the active instruction set (the panels win over
    the integer tiles where both exist)."""
    if ck.panels_isa() != "none":
        return f"float panels {ck.panels_isa()}"
    return f"int8 {ck.int8_isa()}" if ck.int8_isa() != "none" else "float"


def _self_test(ck) -> str | None:
    """Each kernel once against MLX on small random inputs; the first disagreement, if any."""
    try:
        key = mx.random.key(7)
        x = mx.random.normal((3, 64), key=key)
        w, scales, biases = mx.quantize(mx.random.normal((40, 64), key=key), 32, 4)
        heads = x.reshape(1, 3, 1, 64)  # q, k and v of three heads, one position
        offset = mx.array(5, dtype=mx.int32)
        # Whole numbers with 127 in every block of 32: what the integer paths round
        # activations to is then x itself, so every path must agree with MLX's.
        xq = mx.clip(mx.round(x * 40), -127, 127)
        xq = mx.where(mx.arange(64) % 32 == 0, mx.array(127.0), xq)
        checks = {
            "quantized_matmul": (
                ck.quantized_matmul(xq, w, scales, biases, 32, 4),
                mx.quantized_matmul(xq, w, scales, biases, group_size=32, bits=4),
            ),
            "rms_norm": (ck.rms_norm(x, x[0], 1e-5), mx.fast.rms_norm(x, x[0], 1e-5)),
            "swiglu": (ck.swiglu(x, x[::-1]), x * mx.sigmoid(x) * x[::-1]),
            "rope": (
                ck.rope(heads, 64, traditional=False, base=1e4, scale=1.0, offset=offset),
                mx.fast.rope(heads, 64, traditional=False, base=1e4, scale=1.0, offset=5),
            ),
            "attention": (
                ck.attention(heads, heads, heads, scale=0.125),
                mx.fast.scaled_dot_product_attention(heads, heads, heads, scale=0.125),
            ),
            "gated_delta": _gated_delta_pair(ck, key),
        }
        for name, (ours, theirs) in checks.items():
            if not mx.allclose(ours, theirs, rtol=1e-4, atol=1e-4).item():
                return f"{name} disagrees with MLX"
        # Greedy rows (inverse temperature 0) of the sampler; a build from before it has none.
        if hasattr(ck, "sample_rows"):
            greedy = ck.sample_rows(x, mx.zeros((3, 5))).tolist()
            if greedy != mx.argmax(x, axis=-1).tolist():
                return "sample_rows disagrees with MLX's argmax"
    except Exception as exc:  # a broken build must not take the engine down
        return f"{type(exc).__name__}: {exc}"
    return None


def _gated_delta_pair(ck, key: mx.array) -> tuple[mx.array, mx.array]:
    """The recurrence's new state over three steps of two heads: the kernel's, mlx-lm's."""
    from mlx_lm.models.gated_delta import gated_delta_ops

    q, k, v = (mx.random.normal((1, 3, 2, 32), key=mx.random.key(i)) * 0.2 for i in range(3))
    g = mx.random.uniform(0.5, 1.0, (1, 3, 2), key=key)
    beta = mx.random.uniform(0.0, 1.0, (1, 3, 2), key=key)
    state = mx.zeros((1, 2, 32, 32))
    flat = ck.gated_delta(q, k, v, g, beta, state)
    return flat[: state.size].reshape(state.shape), gated_delta_ops(q, k, v, g, beta, state)[1]
