"""A machine where kernels/ did not build (no compiler): the server still answers, on MLX's own
path, and says why once in its log and on /health."""

import os

import httpx
import pytest

from tests.support.helpers import CHAT, DEMO_ID
from tests.support.live_server import live_server

# What is tested is the engine's fallback; the server's database plays no part in it.
pytestmark = pytest.mark.database_independent


def test_a_server_without_the_cpu_kernels_answers_on_mlx_path(demo_gguf, tmp_path):
    stub = tmp_path / "stub" / "cpu_kernels"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text('raise ImportError("no C++ compiler on this machine")\n')
    path = os.pathsep.join(filter(None, [str(stub.parent), os.environ.get("PYTHONPATH")]))
    setup = ("import_gguf", str(demo_gguf), "--id", DEMO_ID)
    with live_server(tmp_path / "var", setup, PYTHONPATH=path) as server:
        body = {
            "model": DEMO_ID,
            "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "temperature": 0,
            "max_tokens": 16,
        }
        for _ in range(2):  # a second request finds the model loaded: nothing said again
            answer = httpx.post(f"{server.url}{CHAT}", json=body, timeout=120)
            assert answer.status_code == 200
            assert "Paris" in answer.json()["choices"][0]["message"]["content"]
        health = server.health()
        assert health["cpu_kernels"].startswith(
            "off: not built (no C++ compiler on this machine); `make` builds kernels/"
        )
        pool = httpx.get(f"{server.url}/control/pool", headers=server.admin_headers).json()
        (model,) = pool["models"]
        assert model["cpu_kernels"] is False
        assert model["compute_format"] in ("float32", "stored")  # float32 where OpenBLAS is
        log = server.output()
        assert log.count("CPU kernels not built (no C++ compiler on this machine)") == 1
