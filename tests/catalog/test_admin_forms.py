"""The catalog admin's forms without traps: list settings typed one per line, help texts shown
as written, a context checked against the model's own, max tokens against the output limit,
and what saving a loaded model does to it."""

from __future__ import annotations

import io
import re

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError
from django.core.management import call_command

from catalog import background
from catalog.models import CatalogModel, HubPull, ModelFamily
from inference.runtime import engine_handle
from inference.serving.control import unload_model, warm_model
from tests.catalog.test_admin import form

ADD = "/admin/catalog/catalogmodel/add/"
FAMILY_ADD = "/admin/catalog/modelfamily/add/"


def entry_form(location: str, **fields: str) -> dict[str, str]:
    """The catalog model form as the admin posts it (test_admin's), for a model `m`."""
    return form(public_id="m", location=location, **fields)


def family_form(**fields: str) -> dict[str, str]:
    data = {"slug": "custom", "name": "Custom", "adapter": "chatml", "priority": "50"}
    return {**data, "_save": "Save", **fields}


def errors_of(response) -> str:
    return " ".join(re.findall(r'<ul class="errorlist[^"]*"[^>]*>(.*?)</ul>', response.text, re.S))


def test_aliases_typed_one_per_line_save_as_a_list(admin_client, tiny_dir):
    typed = "gpt-4o-mini\n\n  claude-haiku-*  \r\nhf.co/owner/repo:Q4_K_M\n"
    response = admin_client.post(ADD, entry_form(str(tiny_dir), aliases=typed))
    assert response.status_code == 302, errors_of(response)
    entry = CatalogModel.objects.get(public_id="m")
    assert entry.aliases == ["gpt-4o-mini", "claude-haiku-*", "hf.co/owner/repo:Q4_K_M"]
    page = admin_client.get(f"/admin/catalog/catalogmodel/{entry.pk}/change/").text
    box = re.search(r'<textarea name="aliases"[^>]*>(.*?)</textarea>', page, re.S)
    assert box is not None
    assert box[1].strip() == "gpt-4o-mini\nclaude-haiku-*\nhf.co/owner/repo:Q4_K_M"


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        ('["gpt-4o-mini"]', "Write one value per line, without JSON brackets or quotes"),
        ("gpt 4o mini", "use letters, digits"),
        ("gpt-4o\ngpt-4o", "An alias is listed twice."),
        ("m", "is this model&#x27;s own id, not an alias"),
    ],
)
def test_a_bad_alias_list_is_refused_clearly(admin_client, tiny_dir, typed, message):
    response = admin_client.post(ADD, entry_form(str(tiny_dir), aliases=typed))
    assert response.status_code == 200
    assert message in errors_of(response)
    assert not CatalogModel.objects.filter(public_id="m").exists()
    # The box shows what was typed, to be corrected, not a JSON rendering of it.
    assert f">\n{typed}</textarea>" in response.text.replace("&quot;", '"')


def test_family_lists_one_per_line_and_stops_keep_their_spaces(admin_client):
    fields = {
        "name_patterns": "custom\n^my-.*-chat$",
        "model_types": "llama\n\nqwen3",
        "extra_stop_tokens": "<|im_end|>\n<|endoftext|>",
        "stop_strings": "\\n\\nUser:\n Human:",
    }
    response = admin_client.post(FAMILY_ADD, family_form(**fields))
    assert response.status_code == 302, errors_of(response)
    family = ModelFamily.objects.get(slug="custom")
    assert family.name_patterns == ["custom", "^my-.*-chat$"]
    assert family.model_types == ["llama", "qwen3"]
    assert family.extra_stop_tokens == ["<|im_end|>", "<|endoftext|>"]
    assert family.stop_strings == ["\n\nUser:", " Human:"]
    page = admin_client.get(f"/admin/catalog/modelfamily/{family.pk}/change/").text
    assert "\\n\\nUser:\n Human:</textarea>" in page  # shown as typed, escapes and all


def test_family_help_texts_show_the_markers_literally(admin_client):
    page = admin_client.get(FAMILY_ADD).text
    assert "e.g. &lt;think&gt;." in page
    assert "e.g. &lt;/think&gt;." in page
    assert "Hermes &lt;tool_call&gt; for most" in page
    assert "e.g. ." not in page
    assert "Not a LoRA adapter" in page  # the prompt adapter is told apart from LoRA ones
    fields = [f for f in ModelFamily._meta.get_fields() if f.concrete and not f.primary_key]
    assert [f.name for f in fields if not f.help_text] == []


def test_a_context_past_the_model_s_own_is_refused_with_its_limit(admin_client, tiny_dir):
    # The tiny model's config says max_position_embeddings 512.
    response = admin_client.post(ADD, entry_form(str(tiny_dir), context_length="99999999"))
    assert response.status_code == 200
    assert "At most 512 tokens: the model&#x27;s own context" in errors_of(response)
    zero = admin_client.post(ADD, entry_form(str(tiny_dir), context_length="0"))
    assert "Ensure this value is greater than or equal to 1." in errors_of(zero)
    shorter = admin_client.post(ADD, entry_form(str(tiny_dir), context_length="256"))
    assert shorter.status_code == 302, errors_of(shorter)
    entry = CatalogModel.objects.get(public_id="m")
    page = admin_client.get(f"/admin/catalog/catalogmodel/{entry.pk}/change/").text
    assert 'placeholder="512 (the model&#x27;s own)"' in page
    assert "Blank: the model&#x27;s own context" in page


def test_a_command_may_still_go_past_the_model_s_context(db, tiny_dir):
    """add_model --context-length runs the engine past the trained positions on purpose (the
    long-stream tests' 512-token tiny model): only the admin's form holds to the model's own."""
    call_command("add_model", "long", "--local", str(tiny_dir), "--context-length", "20000",
                 stdout=io.StringIO())  # fmt: skip
    entry = CatalogModel.objects.get(public_id="long")
    assert entry.context_length == 20000
    with pytest.raises(ValidationError, match="At most 512 tokens"):
        entry.clean_context_fits()


def test_default_max_tokens_past_the_output_limit_is_refused(admin_client, tiny_dir):
    fields = {"default_max_tokens": "500", "max_output_tokens": "100"}
    response = admin_client.post(ADD, entry_form(str(tiny_dir), **fields))
    assert response.status_code == 200
    errors = re.search(r'field-default_max_tokens.*?<ul class="errorlist[^>]*>(.*?)</ul>',
                       response.text, re.S)  # fmt: skip
    assert errors is not None, "the error is not on the default max tokens field"
    assert "500 is more than the max output tokens (100)" in errors[1]
    fine = admin_client.post(ADD, entry_form(str(tiny_dir), default_max_tokens="100",
                                             max_output_tokens="100"))  # fmt: skip
    assert fine.status_code == 302, errors_of(fine)


def test_saving_a_loaded_model_says_what_happens_to_it(admin_client, tiny_dir):
    entry = CatalogModel.objects.create(public_id="m", location=str(tiny_dir))
    url = f"/admin/catalog/catalogmodel/{entry.pk}/change/"
    async_to_sync(warm_model)(engine_handle(), "m")
    try:
        page = admin_client.get(url).text
        running = re.search(r"weights: [^<]+ · KV cache: [^<]+ · context: 512 tokens", page)
        assert running is not None, "the change page does not say what the model runs with"

        same_load = admin_client.post(url, entry_form(str(tiny_dir), default_temperature="0.3"),
                                      follow=True)  # fmt: skip
        assert (
            "Model m is loaded; the new settings apply from its next request, without reloading"
            in (same_load.text)
        ), re.findall(r'<ul class="messagelist">(.*?)</ul>', same_load.text, re.S)
        reload = admin_client.post(url, entry_form(str(tiny_dir), context_length="256"),
                                   follow=True)  # fmt: skip
        assert (
            "Model m is loaded with the old settings; its load settings changed, so its next "
            in (reload.text)
        )
    finally:
        async_to_sync(unload_model)(engine_handle(), "m")
    cold = admin_client.post(url, entry_form(str(tiny_dir), context_length="128"), follow=True)
    assert "is loaded" not in cold.text
    assert "not loaded: warm it" in admin_client.get(url).text


def test_a_hub_pull_takes_its_aliases_one_per_line(admin_client, monkeypatch, settings, tmp_path):
    """The pull's command line is recorded, not run (a subprocess could not see the test
    database)."""
    settings.VAR_DIR = tmp_path
    started: list[list[str]] = []
    monkeypatch.setattr(
        background.subprocess, "Popen", lambda command, **kw: started.append(command)
    )
    fields = {"repo": "owner/repo", "revision": "main", "model_id": "pulled", "_save": "1"}
    response = admin_client.post(
        "/admin/catalog/hubpull/add/", {**fields, "aliases": "gpt-4o-mini\nclaude-*"}
    )
    assert response.status_code == 302, errors_of(response)
    assert HubPull.objects.get().aliases == ["gpt-4o-mini", "claude-*"]
    (command,) = started
    assert command[-4:] == ["--alias", "gpt-4o-mini", "--alias", "claude-*"]
    refused = admin_client.post(
        "/admin/catalog/hubpull/add/", {**fields, "model_id": "other", "aliases": '["x"]'}
    )
    assert "Write one value per line" in errors_of(refused)
