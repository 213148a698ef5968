"""The prefix cache's disk tier across a restart: a live server writes a prompt's KV into its
folder, shows it in /health and /metrics, and a second server over the same folder (the same
var/) answers the same prompt with its prefix read from disk and the same reply."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.helpers import quantize_model_dir
from tests.support.live_server import LiveServer, live_server

pytestmark = pytest.mark.database_independent  # its servers have their own SQLite

PROMPT = " ".join(f"line {i}: the quick brown fox jumps over the lazy dog." for i in range(12))
BODY = {
    "model": "tiny",
    "messages": [{"role": "user", "content": PROMPT}],
    "max_tokens": 4,
    "temperature": 0,
    "logit_bias": {"2": -100},
}
DISK = {"PREFIX_CACHE_DISK_MIN_TOKENS": "32", "PREFIX_CACHE_DISK_BYTES": "256MiB"}


def disk_tier(server: LiveServer) -> dict:
    document = server.health(timeout=10)["prefix_cache_disk"]
    assert document is not None
    return document


def metrics(server: LiveServer) -> dict[str, float]:
    text = httpx.get(f"{server.url}/metrics", headers=server.admin_headers, timeout=10).text
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("inference_prefix_cache_disk")
    }


def ask(server: LiveServer) -> dict:
    response = httpx.post(f"{server.api}/chat/completions", json=BODY, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def format_reason(server: LiveServer, model: str) -> str:
    """Why the preloaded model computes in its format, once it is loaded."""
    deadline = time.monotonic() + 120
    while True:
        pool = httpx.get(f"{server.url}/control/pool", headers=server.admin_headers, timeout=10)
        loaded = {m["id"]: m for m in pool.json()["models"]}
        if model in loaded:
            return loaded[model]["format_reason"]
        assert time.monotonic() < deadline, server.output()
        time.sleep(0.2)


def wait_for_write(server: LiveServer) -> dict:
    # The writer thread runs niced (the engine's steps win the CPU), so on a loaded machine a
    # write can lag far behind the reply; a dropped or failed write shows in the message.
    deadline = time.monotonic() + 120
    while (tier := disk_tier(server))["writes"] < 1:
        assert time.monotonic() < deadline, f"{tier}\n{server.output()}"
        time.sleep(0.2)
    return tier


def test_a_restart_reuses_the_disk_tier_and_the_measured_compute_format(
    tiny_dir: Path, tmp_path: Path
):
    # Beside "tiny", a 3-bit copy (left to MLX's quantized path by the kernels) whose compute
    # format `auto` times at its first load: the next start reads the verdict from var/.
    quantized = quantize_model_dir(tiny_dir, tmp_path / "tiny-3bit", bits=3)
    database = {"DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}
    setup = [("add_model", name, "--local", str(folder), "--preload")
             for name, folder in (("tiny", tiny_dir), ("tiny3", quantized))]  # fmt: skip
    with live_server(tmp_path, *setup, **database, **DISK) as server:
        assert "; decode steps at batch 1/8 measured " in format_reason(server, "tiny3")
        assert disk_tier(server) == {
            "bytes": 0,
            "max_bytes": 256 * 2**20,
            "entries": 0,
            "hits": 0,
            "misses": 0,
            "failed_reads": 0,
            "writes": 0,
            "dropped_writes": 0,
            "failed_writes": 0,
        }
        first = ask(server)
        assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        tier = wait_for_write(server)
        assert (tier["entries"], tier["misses"], tier["hits"]) == (1, 1, 0)
        assert tier["bytes"] > 0
        assert len(list((tmp_path / "prefix-cache").glob("*.kv"))) == 1
        seen = metrics(server)
        assert seen["inference_prefix_cache_disk_entries"] == 1
        assert seen["inference_prefix_cache_disk_bytes"] == tier["bytes"]
        assert seen["inference_prefix_cache_disk_writes_total"] == 1
        server.stop()

    with live_server(tmp_path, **database, **DISK) as restarted:
        assert disk_tier(restarted)["entries"] == 1  # the folder, read as the server starts
        assert format_reason(restarted, "tiny3").startswith("as measured at a load on ")
        again = ask(restarted)
        prompt_tokens = again["usage"]["prompt_tokens"]
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == prompt_tokens - 1
        assert again["choices"][0]["message"] == first["choices"][0]["message"]
        tier = disk_tier(restarted)
        assert (tier["hits"], tier["misses"]) == (1, 0)
        assert metrics(restarted)["inference_prefix_cache_disk_hits_total"] == 1
