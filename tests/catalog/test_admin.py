import io
import json

import pytest
from django.utils.html import escape

from catalog import background
from catalog.models import CatalogModel, ModelFamily

ADD_URL = "/admin/catalog/catalogmodel/add/"


def form(**fields):
    data = {
        "public_id": "new-model",
        "display_name": "",
        "source": "local",
        "location": "",
        "family": "",
        "enabled": "on",
        "system_prompt": "",
        "default_max_tokens": "",
        "default_temperature": "",
        "default_top_p": "",
        "context_length": "",
        "compute_format": "auto",
        "activations": "15bit",
        "kv_cache": "auto",
        "speculative": "off",
        "draft_tokens": "4",
        "context_overflow": "error",
        "purpose": "chat",
        "pooling": "auto",
        "normalize": "on",
        "_save": "Save",
    }
    return {**data, **fields}


def test_admin_requires_login(client, db):
    response = client.get("/admin/catalog/catalogmodel/")
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_admin_lists_catalog_and_families(admin_client, tiny_dir):
    CatalogModel.objects.create(public_id="tiny", location=str(tiny_dir))
    page = admin_client.get("/admin/catalog/catalogmodel/")
    assert page.status_code == 200
    assert b"tiny" in page.content
    assert b'<div id="site-name"><a href="/admin/">MLX server</a></div>' in page.content
    families = admin_client.get("/admin/catalog/modelfamily/")
    assert families.status_code == 200
    for family in ModelFamily.objects.all():
        assert escape(family.name).encode() in families.content


def test_admin_adds_a_local_model(admin_client, tiny_dir):
    response = admin_client.post(ADD_URL, form(location=str(tiny_dir)))
    assert response.status_code == 302, response.content
    assert CatalogModel.objects.get(public_id="new-model").location == str(tiny_dir)


def test_admin_adds_an_embedding_model(admin_client, tiny_dir):
    fields = {"purpose": "embedding", "pooling": "mean", "query_prefix": "query: "}
    response = admin_client.post(ADD_URL, form(location=str(tiny_dir), **fields))
    assert response.status_code == 302, response.content
    entry = CatalogModel.objects.get(public_id="new-model")
    assert entry.capabilities() == ["embedding"]
    assert (entry.spec().purpose, entry.spec().pooling, entry.query_prefix) == (
        "embedding",
        "mean",
        "query: ",
    )


def test_admin_accepts_a_hub_repo_without_fetching_it(admin_client):
    response = admin_client.post(ADD_URL, form(source="hf", location="mlx-community/Qwen3-4bit"))
    assert response.status_code == 302
    assert CatalogModel.objects.filter(public_id="new-model").exists()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"location": "/definitely/not/here"}, b"is not a directory on this server"),
        ({"location": "relative/path"}, b"Give an absolute path"),
        ({"location": "/tmp"}, b"has no config.json"),
        ({"source": "hf", "location": "not a repo"}, b"is not a Hugging Face repo id"),
        ({"source": "hf", "location": "../../etc"}, b"is not a Hugging Face repo id"),
        ({"public_id": "has space", "location": "/tmp"}, b"no slashes or spaces"),
        ({"public_id": "a/b", "location": "/tmp"}, b"no slashes or spaces"),
        ({"default_temperature": "5"}, b"less than or equal to 2.0"),
        ({"purpose": "embedding", "vision": "on"}, b"Only chat models read images."),
        ({"purpose": "classify"}, b"Select a valid choice"),
    ],
)
def test_admin_form_errors_instead_of_crashes(admin_client, fields, message):
    response = admin_client.post(ADD_URL, form(**fields))
    assert response.status_code == 200
    assert message in response.content
    assert not CatalogModel.objects.exists()


def test_admin_checks_a_draft_model(admin_client, tiny_dir):
    """A draft model: asked for only once chosen, for a text chat model, not itself drafted."""
    drafter = CatalogModel.objects.create(public_id="drafter", location=str(tiny_dir))
    nested = CatalogModel.objects.create(
        public_id="nested", location=str(tiny_dir), draft_model=drafter
    )
    errors = [
        ({"speculative": "draft_model"}, b"Choose a draft model first."),
        ({"draft_model": nested.pk}, b"without a draft of its own"),
        ({"draft_model": drafter.pk, "purpose": "embedding"}, b"Only text chat models"),
    ]
    for fields, message in errors:
        response = admin_client.post(ADD_URL, form(location=str(tiny_dir), **fields))
        assert message in response.content
    fields = {"draft_model": drafter.pk, "speculative": "draft_model"}
    response = admin_client.post(ADD_URL, form(location=str(tiny_dir), **fields))
    assert response.status_code == 302, response.content
    spec = CatalogModel.objects.get(public_id="new-model").spec()
    assert spec.draft == drafter.spec()


def test_admin_sets_mtp_only_where_the_files_ship_a_head(
    admin_client, tiny_dir, smollm_dir, tmp_path
):
    """`speculative: mtp` is refused, saying why, for a model whose files have no MTP head;
    add_model makes it the default where they have one, and leaves it off elsewhere."""
    from django.core.management import call_command

    from tests.support.mtp_models import trained_once

    response = admin_client.post(ADD_URL, form(location=str(tiny_dir), speculative="mtp"))
    assert b"No MTP head here: llama models ship no MTP head" in response.content
    trained = trained_once(smollm_dir)
    response = admin_client.post(ADD_URL, form(location=str(trained), speculative="mtp"))
    assert response.status_code == 302, response.content
    call_command("add_model", "with-head", "--local", str(trained), stdout=io.StringIO())
    call_command("add_model", "without", "--local", str(tiny_dir), stdout=io.StringIO())
    chosen = dict(CatalogModel.objects.values_list("public_id", "speculative"))
    assert chosen == {"new-model": "mtp", "with-head": "mtp", "without": "off"}


def test_family_form_validates_lists(admin_client):
    response = admin_client.post(
        "/admin/catalog/modelfamily/add/",
        {
            "slug": "custom",
            "name": "Custom",
            "adapter": "chatml",
            "priority": "50",
            # One per line now (tests/catalog/test_admin_forms.py): JSON is refused, not read.
            "name_patterns": "qwen\n(unclosed",
            "model_types": "",
            "extra_stop_tokens": '["<|im_end|>"]',
            "stop_strings": "",
            "chat_template": "",
            "_save": "Save",
        },
    )
    assert response.status_code == 200
    assert b"is not a valid regular expression" in response.content
    assert b"Write one value per line, without JSON brackets or quotes" in response.content
    assert not ModelFamily.objects.filter(slug="custom").exists()


def test_catalog_list_shows_what_the_pool_holds(admin_client, tiny_dir):
    from asgiref.sync import async_to_sync

    from inference.runtime import engine_handle
    from inference.serving.control import unload_model, warm_model

    CatalogModel.objects.create(public_id="tiny", location=str(tiny_dir))
    CatalogModel.objects.create(public_id="cold", location=str(tiny_dir))
    async_to_sync(warm_model)(engine_handle(), "tiny")
    try:
        page = admin_client.get("/admin/catalog/catalogmodel/").content.decode()
        tiny_row = next(
            row
            for row in page.split("<tr")
            if 'href="/admin/catalog/catalogmodel/' in row and ">tiny<" in row
        )
        cold_row = next(row for row in page.split("<tr") if ">cold<" in row)
        assert 'alt="True"' in tiny_row.split("field-loaded")[1][:200]
        assert "MiB" in tiny_row and "float32" in tiny_row
        assert 'alt="False"' in cold_row.split("field-loaded")[1][:200]
        assert "(auto)" in cold_row
    finally:
        async_to_sync(unload_model)(engine_handle(), "tiny")


def test_enable_and_disable_actions(admin_client, tiny_dir):
    entry = CatalogModel.objects.create(public_id="tiny", location=str(tiny_dir))
    changelist = "/admin/catalog/catalogmodel/"
    admin_client.post(changelist, {"action": "disable", "_selected_action": [entry.pk]})
    entry.refresh_from_db()
    assert not entry.enabled
    admin_client.post(changelist, {"action": "enable", "_selected_action": [entry.pk]})
    entry.refresh_from_db()
    assert entry.enabled


def test_gguf_import_from_admin_runs_in_the_background(
    admin_client, demo_gguf, monkeypatch, settings, tmp_path
):
    """The admin starts `import_gguf --job` as its own process; here that command is run
    in-process (a subprocess could not see the test database), progress and all."""
    import io
    import shlex

    from django.core.management import call_command

    from catalog.models import GGUFImport

    settings.MODEL_STORAGE_DIR = tmp_path / "models"
    settings.VAR_DIR = tmp_path
    started = []
    monkeypatch.setattr(
        background.subprocess, "Popen", lambda command, **kwargs: started.append(command)
    )
    refused = admin_client.post(
        "/admin/catalog/ggufimport/add/", {"model_id": "imported", "source_path": "/nope.gguf"}
    )
    assert b"There is no such file on the server." in refused.content
    response = admin_client.post(
        "/admin/catalog/ggufimport/add/", {"model_id": "imported", "source_path": str(demo_gguf)}
    )
    assert response.status_code == 302
    job = GGUFImport.objects.get()
    (command,) = started
    assert command[2:] == [
        "import_gguf", "--id", "imported", "--job", str(job.pk), "--", str(demo_gguf)
    ]  # fmt: skip
    listing = admin_client.get("/admin/catalog/ggufimport/").content
    assert b'http-equiv="refresh"' in listing  # watched while it runs
    assert b'<progress max="100" value="0">' in listing

    from catalog.management.commands.import_gguf import Command

    updates = []
    real_update = Command._update

    def watched(self, **fields):
        updates.append(fields)
        real_update(self, **fields)

    monkeypatch.setattr(Command, "_update", watched)
    call_command(*command[2:], stdout=io.StringIO(), stderr=io.StringIO())
    job.refresh_from_db()
    assert job.status == "done" and job.progress == 100
    assert job.imported.public_id == "imported"
    progress = [u["progress"] for u in updates if "progress" in u]
    assert progress == sorted(progress) and 0 < progress[-2] < 100  # step by step
    listing = admin_client.get("/admin/catalog/ggufimport/").content
    assert b'http-equiv="refresh"' not in listing
    assert shlex.join(command)  # a plain command line an operator can rerun


def test_family_edits_apply_without_a_restart(admin_client, tiny_dir):
    from asgiref.sync import async_to_sync

    from apikeys.auth import ANONYMOUS
    from inference.serving.resolve import resolve_model

    family = ModelFamily.objects.create(
        slug="custom", name="Custom", adapter="chatml", priority=1, name_patterns=["^tiny$"]
    )
    CatalogModel.objects.create(public_id="tiny", location=str(tiny_dir), family=family)
    before = async_to_sync(resolve_model)("tiny", ANONYMOUS).adapter.profile.stop_strings
    assert before == ()
    family.stop_strings = ["THE END"]
    family.save()
    after = async_to_sync(resolve_model)("tiny", ANONYMOUS).adapter.profile.stop_strings
    assert after == ("THE END",)


def test_import_from_ollama_page_runs_in_the_background(
    admin_client, client, demo_gguf, django_user_model, monkeypatch, settings, tmp_path
):
    """The "Import from Ollama / LM Studio" page lists what the folders hold and starts
    `import_gguf --ollama NAME --job` (run in-process here, as above), so that Ollama's
    parameters and system prompt reach the catalog."""
    import io

    from django.core.management import call_command

    from catalog.models import GGUFImport
    from tests.support.gguf_layouts import SMOLLM_SYSTEM, add_smollm

    settings.OLLAMA_MODELS_DIR = tmp_path / "ollama"
    settings.LMSTUDIO_MODELS_DIR = tmp_path / "no-lmstudio"
    settings.MODEL_STORAGE_DIR = tmp_path / "models"
    settings.VAR_DIR = tmp_path
    add_smollm(settings.OLLAMA_MODELS_DIR, demo_gguf)
    started = []
    monkeypatch.setattr(
        background.subprocess, "Popen", lambda command, **kwargs: started.append(command)
    )
    page_url = "/admin/catalog/ggufimport/sources/"
    assert page_url.encode() in admin_client.get("/admin/catalog/ggufimport/").content
    page = admin_client.get(page_url).content.decode()
    assert 'data-name="smollm2:latest"' in page and "Q4_1" in page
    assert 'name="model_id" value="smollm2"' in page
    assert f"There is no folder {tmp_path / 'no-lmstudio'} on this server" in page

    CatalogModel.objects.create(public_id="taken", location=str(tmp_path))
    for model_id, refusal in [
        ("taken", "The catalog already has a model with this id."),
        ("no spaces", "Use letters, digits"),
    ]:
        form = {"origin": "ollama", "name": "smollm2:latest", "model_id": model_id}
        response = admin_client.post(page_url, form, follow=True)
        assert escape(f"Could not import smollm2:latest: {refusal}") in response.content.decode()
    missing = {"origin": "ollama", "name": "gone", "model_id": "gone"}
    response = admin_client.post(page_url, missing, follow=True)
    assert b"Ollama has no model" in response.content
    assert not GGUFImport.objects.exists() and not started

    form = {"origin": "ollama", "name": "smollm2:latest", "model_id": "smollm2-f16"}
    admin_client.post(page_url, {**form, "weights": "float16"})
    response = admin_client.post(page_url, {**form, "model_id": "smollm2"})
    assert response.status_code == 302 and response.url == "/admin/catalog/ggufimport/"
    half, job = GGUFImport.objects.order_by("pk")
    assert (job.origin, job.origin_name, job.weights) == ("ollama", "smollm2:latest", "quantized")
    assert started[0][2:] == [
        "import_gguf", "--ollama", "smollm2:latest", "--id", "smollm2-f16",
        "--job", str(half.pk), "--weights", "float16",
    ]  # fmt: skip
    assert started[1][2:] == [
        "import_gguf", "--ollama", "smollm2:latest", "--id", "smollm2", "--job", str(job.pk)
    ]  # fmt: skip
    listing = admin_client.get("/admin/catalog/ggufimport/").content.decode()
    assert "Ollama: smollm2:latest" in listing

    call_command(*started[1][2:], stdout=io.StringIO(), stderr=io.StringIO())
    job.refresh_from_db()
    assert job.status == "done" and job.progress == 100
    assert job.message == "Ollama parameters not applied: num_ctx, stop"
    entry = job.imported
    assert entry.public_id == "smollm2" and entry.family.slug == "chatml"
    assert entry.system_prompt == SMOLLM_SYSTEM and entry.default_max_tokens == 256

    user = django_user_model.objects.create_user("someone", password="pw")
    client.force_login(user)  # not staff: the admin's login page, not the import page
    assert client.get(page_url).url.startswith("/admin/login/")


def test_a_quantized_kv_cache_that_cannot_apply_is_refused_at_save(
    admin_client, tiny_dir, tmp_path
):
    # The tiny model's heads are 16 wide: no group of 32 or 64 divides them.
    response = admin_client.post(ADD_URL, form(location=str(tiny_dir), kv_cache="8bit"))
    assert response.status_code == 200
    assert b"8bit cannot apply: its K/V widths [16] are not multiples of 32" in response.content
    assert not CatalogModel.objects.filter(public_id="new-model").exists()
    # float16 keeps any width; a model with no attention at all keeps no K/V to quantize.
    response = admin_client.post(ADD_URL, form(location=str(tiny_dir), kv_cache="float16"))
    assert response.status_code == 302, response.content
    mamba = tmp_path / "mamba"
    mamba.mkdir()
    (mamba / "config.json").write_text('{"model_type": "mamba2", "hidden_size": 64}')
    (mamba / "model.safetensors").write_bytes(b"")
    fields = {"public_id": "mamba", "location": str(mamba), "kv_cache": "4bit"}
    response = admin_client.post(ADD_URL, form(**fields))
    assert b"4bit cannot apply: the model has no attention layers" in response.content


def test_8bit_activations_are_refused_with_a_float_compute_format(admin_client, tiny_dir):
    """They round on the kernels' integer path, which float weights never take."""
    fields = {"location": str(tiny_dir), "activations": "8bit", "compute_format": "float32"}
    response = admin_client.post(ADD_URL, form(**fields))
    assert response.status_code == 200
    assert b"8bit activations apply to the stored quantized weights" in response.content
    assert not CatalogModel.objects.filter(public_id="new-model").exists()
    response = admin_client.post(ADD_URL, form(**{**fields, "compute_format": "quantized"}))
    assert response.status_code == 302, response.content
    entry = CatalogModel.objects.get(public_id="new-model")
    assert entry.activations == "8bit" and entry.spec().activations == "8bit"


def test_kv_widths_come_from_the_config():
    from inference.engine.formats import declared_kv_widths, kv_refusal

    assert declared_kv_widths({"hidden_size": 576, "num_attention_heads": 9}) == {64}
    mla = {"model_type": "deepseek_v3", "kv_lora_rank": 512, "qk_rope_head_dim": 32}
    assert declared_kv_widths(mla) == {512, 32}
    assert kv_refusal(mla, "8bit") is None  # a 32-wide rope part takes groups of 32
    gemma4 = {"text_config": {"head_dim": 256, "global_head_dim": 512}}
    assert declared_kv_widths(gemma4) == {256, 512}
    assert kv_refusal({"head_dim": 80}, "4bit") == (
        "4bit cannot apply: its K/V widths [80] are not multiples of 32"
    )
    assert kv_refusal({"head_dim": 80}, "float16") is None


def test_a_context_past_llama4_s_first_chunk_is_refused_at_save(admin_client, tmp_path):
    folder = tmp_path / "llama4"
    folder.mkdir()
    text = {"attention_chunk_size": 8192, "max_position_embeddings": 10485760}
    (folder / "config.json").write_text(json.dumps({"model_type": "llama4", "text_config": text}))
    (folder / "model.safetensors").write_bytes(b"")
    fields = {"public_id": "scout", "location": str(folder), "context_length": "32768"}
    response = admin_client.post(ADD_URL, form(**fields))
    assert b"served within its first attention chunk: at most 8191 tokens" in response.content
    response = admin_client.post(ADD_URL, form(**{**fields, "context_length": "8000"}))
    assert response.status_code == 302, response.content
