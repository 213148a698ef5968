"""The names Ollama and LM Studio call a model by reach it at every door once it is imported:
an Ollama import of `smol:135m` (id `smol-135m`) answers to `smol:135m` on /api/chat,
/api/generate and /v1/chat/completions, and Ollama's `x` and `x:latest` are one name
everywhere. The display name is the source's name (or the id), never the GGUF's general.name
(the base model's, the same for every SmolLM2 import)."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.core.management import call_command

from catalog.aliases import named_by, source_aliases
from catalog.models import CatalogModel
from tests.support.gguf_layouts import add_lmstudio_file, add_smollm
from tests.support.helpers import CHAT

HELLO = [{"role": "user", "content": "Say hi."}]


def import_gguf(*args: str) -> str:
    out = io.StringIO()
    call_command("import_gguf", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def sources(db, settings, demo_gguf: Path, tmp_path: Path) -> Path:
    """An Ollama folder holding the demo model as `smol:135m` and `smollm2:latest`, and an
    LM Studio folder holding it once."""
    ollama, lmstudio = tmp_path / "ollama", tmp_path / "lmstudio"
    add_smollm(ollama, demo_gguf, "smol:135m")
    add_smollm(ollama, demo_gguf, "smollm2:latest")
    add_lmstudio_file(lmstudio, "pub/Smol-GGUF/smol-Q4_1.gguf", demo_gguf)
    settings.OLLAMA_MODELS_DIR = ollama
    settings.LMSTUDIO_MODELS_DIR = lmstudio
    settings.MODEL_STORAGE_DIR = tmp_path / "converted"
    return tmp_path


def ollama_chat(client, path: str, model: str) -> dict:
    body = {"model": model, "stream": False, "options": {"num_predict": 3}}
    body |= {"messages": HELLO} if path == "/api/chat" else {"prompt": "Say hi."}
    response = client.post(path, body, content_type="application/json")
    assert response.status_code == 200, response.content
    return response.json()


def openai_chat(client, model: str) -> dict:
    body = {"model": model, "messages": HELLO, "max_tokens": 3}
    response = client.post(CHAT, body, content_type="application/json")
    assert response.status_code == 200, response.content
    return response.json()


def test_an_ollama_name_with_a_tag_reaches_the_model_at_every_door(client, sources):
    out = import_gguf("--ollama", "smol:135m")
    entry = CatalogModel.objects.get(public_id="smol-135m")
    assert entry.aliases == ["smol:135m"]
    assert entry.display_name == "smol:135m"
    assert "smol-135m answers to smol:135m too" in out
    for path in ("/api/chat", "/api/generate"):
        answer = ollama_chat(client, path, "smol:135m")
        assert answer["model"] == "smol:135m" and answer["done"] is True
    answer = openai_chat(client, "smol:135m")
    assert answer["model"] == "smol:135m" and answer["usage"]["completion_tokens"] >= 1
    listed = [m["id"] for m in client.get("/v1/models").json()["data"]]
    assert "smol:135m" in listed  # the alias has its own card, as every alias does


def test_x_and_x_latest_are_one_name_at_every_door(client, sources):
    import_gguf("--ollama", "smollm2")
    entry = CatalogModel.objects.get(public_id="smollm2")
    assert entry.aliases == []  # its id's twin needs no alias
    assert entry.display_name == "smollm2:latest"
    for model in ("smollm2", "smollm2:latest"):
        assert ollama_chat(client, "/api/chat", model)["model"] == model
        assert openai_chat(client, model)["model"] == model
    shown = client.post("/api/show", {"model": "smollm2:latest"}, content_type="application/json")
    assert shown.status_code == 200, shown.content


def test_an_ollama_name_another_model_holds_stays_that_models(client, sources, tiny_dir):
    CatalogModel.objects.create(public_id="other", location=str(tiny_dir), aliases=["smol:135m"])
    out = import_gguf("--ollama", "smol:135m", "--id", "mine")
    assert CatalogModel.objects.get(public_id="mine").aliases == []
    assert "note: 'smol:135m' is not an alias of mine: another model has it" in out


def test_an_lmstudio_name_reaches_the_model(client, sources):
    import_gguf("--lmstudio", "pub/Smol-GGUF")
    entry = CatalogModel.objects.get(public_id="smol-q4_1")
    assert entry.aliases == ["pub/Smol-GGUF/smol-Q4_1.gguf", "pub/Smol-GGUF"]
    assert entry.display_name == "pub/Smol-GGUF/smol-Q4_1.gguf"
    assert openai_chat(client, "pub/Smol-GGUF/smol-Q4_1.gguf")["model"] == (
        "pub/Smol-GGUF/smol-Q4_1.gguf"
    )


def test_a_file_import_is_shown_by_its_id(sources, demo_gguf):
    import_gguf(str(demo_gguf), "--id", "plain")
    entry = CatalogModel.objects.get(public_id="plain")
    assert entry.display_name == "plain" and entry.aliases == []


@dataclass(frozen=True)
class Row:
    public_id: str
    aliases: list[str] = field(default_factory=list)


ROWS = [
    Row("smollm2"),
    Row("smollm2:latest-ish", ["gpt-*"]),
    Row("smol-135m", ["smol:135m", "user/m:latest"]),
    Row("llama3.2:latest"),
]


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("smollm2", "smollm2"),
        ("smollm2:latest", "smollm2"),  # Ollama's default tag: the same name
        ("smol:135m", "smol-135m"),
        ("user/m", "smol-135m"),  # an alias with the tag, asked without it
        ("llama3.2", "llama3.2:latest"),  # an id with the tag, asked without it
        ("gpt-4o", "smollm2:latest-ish"),  # a glob matches the name as sent
        ("nope", None),
    ],
)
def test_every_door_resolves_a_name_the_same_way(name, model):
    found = named_by(name, ROWS)
    assert (found.public_id if found else None) == model


def test_a_source_name_is_an_alias_only_where_it_names_nothing_else():
    entry = Row("new")
    names = ["smol:135m", "smollm2:latest", "fresh:7b", "new:latest", "bad name", "fresh:7b"]
    assert source_aliases(names, entry, ROWS) == ["fresh:7b"]
