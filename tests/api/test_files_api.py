"""OpenAI's Files API through the official openai SDK on a live server: upload (multipart,
larger than MAX_REQUEST_BODY), list, retrieve, content, delete; OpenAI's shapes and errors;
another key (and a caller without one) sees nothing of a key's files; the caps; the files are
owner-only on disk."""

from __future__ import annotations

import io
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.support.live_server import LiveServer, live_server

# Its server has its own database; what it stores (files) is checked through the API.
pytestmark = pytest.mark.database_independent

MAX_FILE = 6 * 1024 * 1024  # above MAX_REQUEST_BODY (4 MiB): the upload is not held to it
PER_KEY = 9 * 1024 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    var = tmp_path_factory.mktemp("files")
    limits = {"MAX_FILE_BYTES": str(MAX_FILE), "MAX_FILE_BYTES_PER_KEY": str(PER_KEY)}
    with live_server(var, REQUIRE_API_KEY="true", **limits) as live:
        yield live


@pytest.fixture(scope="module")
def keys(server: LiveServer) -> tuple[str, str]:
    return tuple(server.manage("create_api_key", name).stdout.strip() for name in "ab")


@pytest.fixture(scope="module")
def alice(server: LiveServer, keys) -> openai.OpenAI:
    return server.openai(keys[0])


@pytest.fixture(scope="module")
def bob(server: LiveServer, keys) -> openai.OpenAI:
    return server.openai(keys[1])


def test_upload_list_retrieve_content_delete(server: LiveServer, alice, bob):
    content = (b'{"a": 1}\n' * 700_000)[: MAX_FILE - 10]  # past MAX_REQUEST_BODY
    made = alice.files.create(file=("data.jsonl", io.BytesIO(content)), purpose="batch")
    assert made.object == "file" and made.id.startswith("file-")
    assert (made.bytes, made.filename, made.purpose, made.status) == (
        len(content),
        "data.jsonl",
        "batch",
        "processed",
    )
    assert made.expires_at is None
    assert alice.files.retrieve(made.id).model_dump() == made.model_dump()
    assert alice.files.content(made.id).content == content
    listed = alice.files.list()
    assert [f.id for f in listed.data] == [made.id]
    assert alice.files.list(purpose="user_data").data == []
    stored = Path(server.env["VAR_DIR"]) / "files"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o700
    assert stat.S_IMODE((stored / made.id).stat().st_mode) == 0o600
    # Another key, and a caller without a key, see nothing.
    with pytest.raises(openai.NotFoundError) as missing:
        bob.files.retrieve(made.id)
    assert missing.value.body["message"] == f"No such File object: {made.id}"
    with pytest.raises(openai.NotFoundError):
        bob.files.content(made.id)
    with pytest.raises(openai.NotFoundError):
        bob.files.delete(made.id)
    assert bob.files.list().data == []
    anonymous = httpx.get(f"{server.api}/files/{made.id}")
    assert anonymous.status_code == 401
    deleted = alice.files.delete(made.id)
    assert (deleted.id, deleted.object, deleted.deleted) == (made.id, "file", True)
    assert not (stored / made.id).exists()
    with pytest.raises(openai.NotFoundError):
        alice.files.retrieve(made.id)


def test_expiry_and_paging(alice):
    made = [
        alice.files.create(
            file=(f"f{i}.txt", io.BytesIO(b"x" * (i + 1))),
            purpose="user_data",
            expires_after={"anchor": "created_at", "seconds": 3600},
        )
        for i in range(3)
    ]
    assert all(f.expires_at == f.created_at + 3600 for f in made)
    first = alice.files.list(limit=2, order="asc", purpose="user_data")
    assert [f.id for f in first.data] == [made[0].id, made[1].id] and first.has_more
    rest = alice.files.list(limit=2, order="asc", after=made[1].id, purpose="user_data")
    assert [f.id for f in rest.data] == [made[2].id] and not rest.has_more
    newest = alice.files.list(limit=1)
    assert newest.data[0].id == made[2].id
    for f in made:
        alice.files.delete(f.id)


def test_refusals_in_openai_words(server: LiveServer, keys, alice):
    with pytest.raises(openai.BadRequestError) as bad:
        alice.files.create(file=("x.txt", io.BytesIO(b"x")), purpose="pictures")  # type: ignore[arg-type]
    assert bad.value.body["param"] == "purpose"
    assert "Invalid value for purpose: 'pictures'" in bad.value.body["message"]
    with pytest.raises(openai.BadRequestError) as short:
        alice.files.create(
            file=("x.txt", io.BytesIO(b"x")),
            purpose="batch",
            expires_after={"anchor": "created_at", "seconds": 5},
        )
    assert short.value.body["param"] == "expires_after.seconds"
    headers = {"Authorization": f"Bearer {keys[0]}"}
    form = {"purpose": (None, "batch")}  # a multipart form without its file
    no_file = httpx.post(f"{server.api}/files", files=form, headers=headers)
    assert no_file.status_code == 400 and no_file.json()["error"]["param"] == "file"
    as_json = httpx.post(f"{server.api}/files", json={"purpose": "batch"}, headers=headers)
    assert as_json.status_code == 400
    assert "multipart/form-data" in as_json.json()["error"]["message"]
    with pytest.raises(openai.APIStatusError) as big:
        alice.files.create(file=("big", io.BytesIO(b"x" * (MAX_FILE + 1))), purpose="batch")
    assert big.value.status_code == 413 and "MAX_FILE_BYTES" in big.value.body["message"]
    # Past the door's allowance (the file and its form), unread; a stranger's big body too.
    huge = b"x" * (MAX_FILE + 128 * 1024)
    with pytest.raises(openai.APIStatusError) as door:
        alice.files.create(file=("huge", io.BytesIO(huge)), purpose="batch")
    assert door.value.status_code == 413
    stranger = httpx.post(f"{server.api}/files", files={"file": ("b", b"x" * 5_000_000)})
    assert stranger.status_code == 413 and "MAX_REQUEST_BODY" in stranger.json()["error"]["message"]


def test_a_keys_files_are_held_to_its_quota(alice, bob):
    kept = alice.files.create(file=("a", io.BytesIO(b"x" * (5 * 1024 * 1024))), purpose="batch")
    with pytest.raises(openai.RateLimitError) as full:
        alice.files.create(file=("b", io.BytesIO(b"x" * (5 * 1024 * 1024))), purpose="batch")
    assert "MAX_FILE_BYTES_PER_KEY" in full.value.body["message"]
    other = bob.files.create(file=("b", io.BytesIO(b"x" * (5 * 1024 * 1024))), purpose="batch")
    for client, made in ((alice, kept), (bob, other)):
        client.files.delete(made.id)
