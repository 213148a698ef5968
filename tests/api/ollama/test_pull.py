"""Ollama's POST /api/pull from the Hugging Face hub, with the official `ollama` client against a
live server whose HF_ENDPOINT is the stand-in hub (tests/support/hub_server.py), serving a GGUF
repo of two quantizations (copies of the demo SmolLM2): the admin token pulls `hf.co/owner/repo:TAG`
with Ollama's progress lines, the name pulled then chats and is listed; an API key may pull
only what the catalog has; an unknown repo or tag, and a pull that fails, say so in Ollama's
{"error": ...}."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import pytest

from tests.support.hub_server import Hub, stand_in_hub
from tests.support.live_server import ROOT, LiveServer, live_server

# Each server has its own SQLite; nothing here depends on the suite's database.
pytestmark = pytest.mark.database_independent

REPO = "test-org/SmolLM2-GGUF"
Q4 = "SmolLM2-135M-Instruct-Q4_1.gguf"
Q8 = "SmolLM2-135M-Instruct-Q8_0.gguf"
PULLED = f"hf.co/{REPO}:Q4_1"
PULLED_ID = "smollm2-gguf-q4_1"  # the repo and the tag, as a catalog id


@pytest.fixture(scope="module")
def hub(demo_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    folder = tmp_path_factory.mktemp("gguf-repo")
    for name in (Q4, Q8):  # two quantizations, one content (the test reads names, not bytes)
        (folder / name).symlink_to(demo_gguf)
    with stand_in_hub() as hub:
        hub.add_repo(REPO, folder)
        hub.pace[Q4] = 2.0  # slow enough for the progress lines to show bytes growing
        yield hub


@pytest.fixture(scope="module")
def server(hub: Hub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    var = tmp_path_factory.mktemp("pull-var")
    with live_server(var, REQUIRE_API_KEY="true", HF_ENDPOINT=hub.url) as server:
        yield server


@pytest.fixture(scope="module")
def admin(server: LiveServer) -> ollama.Client:
    return ollama.Client(host=server.url, headers=server.admin_headers, timeout=300)


@pytest.fixture(scope="module")
def making_key(server: LiveServer) -> subprocess.Popen:
    # A manage.py process takes seconds: this one runs beside the pull, read when needed.
    command = [sys.executable, "manage.py", "create_api_key", "ollama"]
    return subprocess.Popen(command, cwd=ROOT, env=server.env, stdout=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def keyed(server: LiveServer, making_key: subprocess.Popen) -> ollama.Client:
    key = making_key.communicate(timeout=60)[0].strip()
    return ollama.Client(host=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=300)


@pytest.fixture(scope="module")
def pulled(admin: ollama.Client, making_key: subprocess.Popen) -> list[ollama.ProgressResponse]:
    return list(admin.pull(PULLED, stream=True))


def test_a_hub_pull_streams_progress_and_ends_in_success(pulled, hub: Hub, demo_gguf: Path):
    statuses = [part.status for part in pulled]
    assert statuses[0] == "pulling manifest"
    assert statuses[-3:] == ["verifying sha256 digest", "writing manifest", "success"]
    layers = [part for part in pulled if part.digest]
    digest = hub.sha256(demo_gguf)
    assert {part.digest for part in layers} == {f"sha256:{digest}"}
    assert {part.status for part in layers} == {f"pulling {digest[:12]}"}
    completed = [part.completed for part in layers]
    size = demo_gguf.stat().st_size
    assert all(part.total == size for part in layers)
    assert completed == sorted(completed) and completed[0] == 0 and completed[-1] == size
    assert len(set(completed)) >= 3, completed  # bytes seen arriving, not only start and end


def test_the_pulled_name_chats_and_is_listed(pulled, keyed: ollama.Client):
    reply = keyed.chat(
        model=PULLED,
        messages=[{"role": "user", "content": "Say hello."}],
        options={"num_predict": 4, "temperature": 0},
    )
    assert reply.model == PULLED and reply.message.content
    assert f"{PULLED_ID}:latest" in [m.model for m in keyed.list().models]


def test_a_model_in_the_catalog_pulls_with_an_api_key(pulled, keyed: ollama.Client):
    for name in (PULLED, f"huggingface.co/{REPO}:Q4_1", f"{PULLED_ID}:latest"):
        assert keyed.pull(name).status == "success"
    assert [part.status for part in keyed.pull(PULLED, stream=True)] == ["success"]


def test_an_api_key_may_not_pull_from_the_hub(server: LiveServer, keyed: ollama.Client):
    with pytest.raises(ollama.ResponseError) as caught:
        keyed.pull(f"hf.co/{REPO}:Q8_0")
    assert caught.value.status_code == 403 and "admin token" in caught.value.error
    key = keyed._client.headers["Authorization"]
    body = {"model": f"hf.co/{REPO}:Q8_0"}
    response = httpx.post(f"{server.url}/api/pull", json=body, headers={"Authorization": key})
    assert response.status_code == 403 and list(response.json()) == ["error"]


def test_an_unknown_repo_or_tag_is_an_error(admin: ollama.Client):
    with pytest.raises(ollama.ResponseError) as caught:
        list(admin.pull("hf.co/test-org/nothing-here:Q4_K_M", stream=True))
    assert caught.value.status_code == 404 and "was not found" in caught.value.error
    with pytest.raises(ollama.ResponseError) as caught:
        admin.pull(f"hf.co/{REPO}:Q2_K")
    assert caught.value.status_code == 404
    assert f"has no GGUF file for Q2_K; its GGUF files: {Q4}" in caught.value.error
    with pytest.raises(ollama.ResponseError) as caught:
        admin.pull("llama3.2:latest")  # Ollama's own registry: not this server's to pull from
    assert caught.value.status_code == 501 and "pull is not available" in caught.value.error


def test_a_failed_pull_ends_the_stream_with_the_error(hub: Hub, admin: ollama.Client) -> None:
    # Both names: the two files are one content, which the stand-in's CDN serves by checksum.
    hub.corrupt.update({Q4: b"?", Q8: b"?"})  # a file that ends short, every time it is asked
    try:
        with pytest.raises(ollama.ResponseError, match=f"connection dropped while fetching {Q8}"):
            list(admin.pull(f"hf.co/{REPO}:q8_0", stream=True))  # the tag in any case
    finally:
        hub.corrupt.clear()
