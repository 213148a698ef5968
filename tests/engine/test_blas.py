"""The BLAS swap under MLX's CPU backend: proven by what MLX's library binds to, not by timing."""

import os
import subprocess
import sys

import pytest
from django.conf import settings

from inference import blas
from tests.support.helpers import ROOT, wait_until

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="the swap exists on Linux only")

# Calls one float32 matmul in a fresh process set up like the server (settings first).
PROBE = """
import django, os
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()
import mlx.core as mx
a = mx.ones((64, 64))
mx.eval(a @ a)
"""


def bindings_of_sgemm(extra_env: dict) -> list[str]:
    env = {**os.environ, **extra_env, "LD_DEBUG": "bindings"}
    probe = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    return [
        line
        for line in probe.stderr.splitlines()
        if "libmlx.so" in line.split("to")[0] and "`cblas_sgemm'" in line
    ]


@linux_only
def test_mlx_binds_sgemm_to_openblas():
    assert settings.BLAS.library, settings.BLAS.reason
    (binding,) = bindings_of_sgemm({})
    assert "openblas" in binding.split(" to ")[1]
    assert "openblas" in blas.global_provider()


@linux_only
def test_the_swap_can_be_turned_off():
    (binding,) = bindings_of_sgemm({"BLAS_PRELOAD": "false"})
    assert "openblas" not in binding.split(" to ")[1]
    assert "mlx_cpu.libs/libblas" in binding


def test_too_late_once_mlx_is_imported(monkeypatch):
    monkeypatch.setitem(sys.modules, "mlx.core", object())
    monkeypatch.setattr(sys, "platform", "linux")
    status = blas._preload(True, None)
    assert status.library is None
    assert "too late" in status.reason


def test_off_on_other_platforms(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert "not Linux" in blas._preload(True, None).reason
    assert "disabled" in blas._preload(False, None).reason


def test_health_reports_the_blas_and_the_cpu_kernels(client, db):
    def health() -> dict:  # the details are for the admin token
        token = {"HTTP_AUTHORIZATION": f"Bearer {settings.ADMIN_TOKEN}"}
        return client.get("/health", **token).json()

    assert health()["blas"] == (settings.BLAS.library or "mlx-bundled")
    # Decided as the engine thread starts; kernels/ builds on every machine the suite runs on.
    assert wait_until(lambda: health()["cpu_kernels"], timeout=30)
    assert health()["cpu_kernels"].startswith(("avx512, ", "avx2, "))
