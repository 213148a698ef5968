"""Model families read off the model itself (inference/adapters/detect.py, catalog/families.py)
against llama.cpp's real chat templates, and the family rows migration 0015 seeds."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

import catalog.families
from catalog.families import choose_family, detect_family
from catalog.models import CatalogModel, ModelFamily
from inference.adapters.detect import SLUGS, detect
from inference.adapters.registry import ADAPTERS
from inference.adapters.toolcalls import syntax_choices, syntax_class

# Each real template of a family the catalog seeds, and the family it is.
TABLE = {
    "Qwen3.5-4B.jinja": "qwen3-5",
    "Qwen3-Coder.jinja": "qwen3-coder",
    "Qwen-Qwen3-0.6B.jinja": "qwen3",
    "Qwen-QwQ-32B.jinja": "qwq",
    "Qwen-Qwen2.5-7B-Instruct.jinja": "chatml",
    "GLM-4.6.jinja": "glm-4-5",
    "GLM-4.7-Flash.jinja": "glm-4-7",
    "openai-gpt-oss-120b.jinja": "gpt-oss",
    "deepseek-ai-DeepSeek-V3.1.jinja": "deepseek-v3",
    "deepseek-ai-DeepSeek-V3.2.jinja": "deepseek-v3-2",
    "deepseek-ai-DeepSeek-V4.jinja": "deepseek-v3-2",
    "deepseek-ai-DeepSeek-V4-Flash-0731.jinja": "deepseek-v3-2",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja": "deepseek-r1",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": "deepseek-r1",
    "llama-cpp-deepseek-r1.jinja": "deepseek-r1",
    "moonshotai-Kimi-K2.jinja": "kimi-k2",
    "Kimi-K2-Instruct.jinja": "kimi-k2",
    "Kimi-K2-Thinking.jinja": "kimi-k2-thinking",
    "Kimi-K3.jinja": "kimi-k3",
    "MiniMax-M2.jinja": "minimax-m2",
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": "mistral",
    "unsloth-mistral-Devstral-Small-2507.jinja": "mistral",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": "mistral",
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": "magistral",
    "meta-llama-Llama-3.1-8B-Instruct.jinja": "llama",
    "meta-llama-Llama-3.2-3B-Instruct.jinja": "llama",
    "meta-llama-Llama-3.3-70B-Instruct.jinja": "llama",
    "google-gemma-2-2b-it.jinja": "gemma",
    "google-gemma-4-31B-it.jinja": "gemma4",
    "google-gemma-4-31B-it-interleaved.jinja": "gemma4",
    "ibm-granite-granite-4.0.jinja": "granite",
    "ibm-granite-granite-4.1.jinja": "granite",
    "ibm-granite-granite-3.3-2B-Instruct.jinja": "granite3",
    "NVIDIA-Nemotron-Nano-v2.jinja": "nemotron-nano-v2",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja": "nemotron3-nano",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja": "hermes",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": "hermes",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": "command-r",
    "HuggingFaceTB-SmolLM3-3B.jinja": "smollm3",
}
# Their templates think only when `thinking` is true, and then open <think> in the prompt; the
# rows cannot say "opened, but only when asked" (see migration 0015), so they say not opened.
THINKS_ONLY_WHEN_ASKED = {"deepseek-v3", "deepseek-v3-2"}
# Templates whose call markers are built from pieces (DSML's dsml_token, K3's tag macros) or
# that write no call marker at all (no tools; Llama 3.2's bare JSON).
MARKERS_NOT_LITERAL = {"deepseek-v3-2", "kimi-k3", "gemma", "smollm3", "llama"}


@pytest.fixture(scope="module")
def templates(llama_cpp_tree: Path) -> Path:
    return llama_cpp_tree / "models" / "templates"


@pytest.fixture
def seeded(db) -> dict[str, ModelFamily]:
    return {family.slug: family for family in ModelFamily.objects.all()}


@pytest.fixture(autouse=True)
def fresh_cache():
    catalog.families._DETECTED.clear()


@pytest.mark.parametrize(("name", "slug"), TABLE.items())
def test_each_family_template_is_detected(templates: Path, name: str, slug: str):
    found = detect((templates / name).read_text(), ())
    assert found is not None and (found.slug, found.generic) == (slug, False)
    assert found.reason.startswith(("chat template writes", "chat template opens", "chat "))


def test_other_templates_are_unknown_or_only_their_format(templates: Path):
    """Apertus, Phi, LFM2, StepFun… are no family the catalog seeds: at most the prompt format
    they share (ChatML, Llama 3 headers) is told, which a name may overrule."""
    others = sorted(p for p in templates.glob("*.jinja") if p.name not in TABLE)
    assert len(others) >= 20
    told = {p.name: detect(p.read_text(), ()) for p in others}
    assert all(found is None or found.generic for found in told.values()), told
    assert told["microsoft-Phi-3.5-mini-instruct.jinja"] is None
    assert told["StepFun3.5-Flash.jinja"].slug == "chatml"  # ChatML, not Qwen3.5's switch
    assert told["MiniMax-M3.jinja"] is None  # not M2's syntax


def test_special_tokens_tell_when_the_template_does_not():
    assert detect(None, ["<|start|>", "<|channel|>"]).slug == "gpt-oss"
    found = detect("", ["<|im_start|>", "<|im_end|>"])
    assert (found.slug, found.generic) == ("chatml", True)
    assert "special token <|im_start|>" in found.reason
    assert detect("{{ messages }}", ["<s>"]) is None

    def unread():
        raise AssertionError("special tokens read although the template decided")
        yield

    assert detect("[gMASK]<|assistant|><arg_key><arg_value>", unread()).slug == "glm-4-5"


def test_every_detected_family_is_seeded(seeded: dict[str, ModelFamily]):
    assert set(seeded) >= SLUGS
    assert set(seeded) >= {"default", "think"}  # earlier rows stay


def test_seeded_rows_load(seeded: dict[str, ModelFamily]):
    syntaxes = {name for name, _ in syntax_choices()}
    for family in seeded.values():
        profile = family.profile()
        assert profile.tool_syntax == family.tool_syntax
        assert family.adapter in ADAPTERS, family.slug
        assert bool(profile.reasoning_start) == bool(profile.reasoning_end), family.slug
        if not family.tool_syntax:
            continue
        assert family.tool_syntax in syntaxes, family.slug
        module, _ = syntax_module(family.tool_syntax)
        if importlib.util.find_spec(module) is not None:  # some are still being written
            assert syntax_class(family.tool_syntax).name == family.tool_syntax
    assert seeded["qwen3-5"].tool_syntax == "qwen3_xml"
    assert seeded["gpt-oss"].adapter == "harmony"
    assert seeded["deepseek-v3"].thinking_switch == "thinking"
    assert seeded["chatml"].name_patterns == ["qwen", "smollm", "chatml"]


def syntax_module(name: str) -> tuple[str, str]:
    from inference.adapters.toolcalls import registry

    module, cls, _ = registry._SYNTAXES[name]
    return f"inference.adapters.toolcalls.{module}", cls


def render(template: str, messages: list[dict], **kwargs) -> str:
    rendered, _ = render_jinja_template(
        [messages],
        chat_template=template,
        add_generation_prompt=True,
        bos_token="<s>",
        eos_token="</s>",
        **kwargs,
    )
    return rendered[0]


@pytest.mark.parametrize(("name", "slug"), TABLE.items())
def test_rows_say_what_their_templates_do(seeded, templates: Path, name: str, slug: str):
    """Markers, switch and stops are the template's own; the prompt opens the thinking exactly
    when the row says so; the row's syntax is how the template writes a call."""
    family, text = seeded[slug], (templates / name).read_text()
    for stop in family.extra_stop_tokens:
        assert stop in text or slug == "llama", stop  # Llama 3's vocabulary stops
    if family.tool_syntax and slug not in MARKERS_NOT_LITERAL:
        assert any(marker in text for marker in syntax_class(family.tool_syntax).markers)
    if not family.reasoning_start:
        return
    hello = [{"role": "user", "content": "Hi"}]
    history = [*hello, {"role": "assistant", "content": "A", "reasoning_content": "R"}, *hello]
    shown = text + render(text, history)
    assert family.reasoning_start in shown and family.reasoning_end in shown
    # llama.cpp's copies of QwQ's and R1's templates test an enable_thinking the models' own
    # lack (llama-server always passes it): thinking asked for, it is true.
    switch = family.thinking_switch or "enable_thinking"
    opened = render(text, hello, **{switch: True}).rstrip().endswith(family.reasoning_start)
    assert opened == (family.reasoning_in_prompt or slug in THINKS_ONLY_WHEN_ASKED)
    assert not render(text, hello).rstrip().endswith(family.reasoning_start) or (
        family.reasoning_in_prompt
    )
    if family.thinking_switch:
        assert family.thinking_switch in text
        off = render(text, hello, **{family.thinking_switch: False})
        assert not off.rstrip().endswith(family.reasoning_start)


def model_folder(
    tmp_path: Path, template: object = None, files: dict[str, object] | None = None
) -> Path:
    """A model folder with `template` in its tokenizer_config.json and `files` as JSON."""
    folder = tmp_path / "model"
    folder.mkdir(parents=True, exist_ok=True)
    config = {"chat_template": template} if template is not None else {}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    for name, content in (files or {}).items():
        (folder / name).write_text(json.dumps(content))
    return folder


def entry_at(folder: Path, public_id: str = "my-model", **fields) -> CatalogModel:
    return CatalogModel(public_id=public_id, location=str(folder), **fields)


@pytest.mark.django_db
def test_the_template_decides_before_the_name(templates: Path, tmp_path: Path):
    folder = model_folder(tmp_path, (templates / "Qwen3.5-4B.jinja").read_text())
    entry = entry_at(folder, "Meta-Llama-3-8B")  # the name says Llama
    choice = choose_family(entry, list(ModelFamily.objects.all()))
    assert choice.family.slug == "qwen3-5"
    assert choice.reason.startswith("detected: chat template writes <function=")
    assert detect_family(entry, list(ModelFamily.objects.all())).slug == "qwen3-5"


@pytest.mark.django_db
def test_template_files_the_folder_may_keep(templates: Path, tmp_path: Path):
    families = list(ModelFamily.objects.all())
    r7b = (templates / "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja").read_text()
    # Command R keeps named templates; the calls are in the tool_use one.
    named = [
        {"name": "default", "template": "{{ messages }}"},
        {"name": "tool_use", "template": r7b},
    ]
    folder = model_folder(tmp_path / "named", named)
    assert detect_family(entry_at(folder), families).slug == "command-r"
    folder = model_folder(tmp_path / "jinja")
    (folder / "chat_template.jinja").write_text((templates / "GLM-4.7-Flash.jinja").read_text())
    assert detect_family(entry_at(folder), families).slug == "glm-4-7"
    added = {"added_tokens": [{"content": "<|channel|>"}]}
    folder = model_folder(tmp_path / "tokens", files={"tokenizer.json": added})
    choice = choose_family(entry_at(folder), families)
    assert (choice.family.slug, choice.reason) == (
        "gpt-oss",
        "detected: tokenizer has the special token <|channel|> (gpt-oss harmony)",
    )


@pytest.mark.django_db
def test_names_are_the_fallback(tmp_path: Path):
    families = list(ModelFamily.objects.all())
    chatml = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}"
    )
    folder = model_folder(tmp_path / "plain", chatml)
    # A template that shows only its format: a name that knows the model wins.
    choice = choose_family(entry_at(folder, "Qwen3-8B-my-finetune"), families)
    assert (choice.family.slug, choice.reason) == (
        "qwen3",
        "its name matches the pattern 'qwen3'",
    )
    choice = choose_family(entry_at(folder, "odd-model"), families)
    assert (choice.family.slug, choice.reason) == (
        "chatml",
        "detected: chat template writes <|im_start|> (ChatML)",
    )
    # config's model_type goes before a format-only template: SmolLM2-like llamas stay Llama's.
    llama = model_folder(tmp_path / "llama", chatml, files={"config.json": {"model_type": "llama"}})
    choice = choose_family(entry_at(llama, "odd-model"), families)
    assert (choice.family.slug, choice.reason) == ("llama", "config.json says model_type llama")
    bare = model_folder(tmp_path / "bare", files={"config.json": {"model_type": "gemma4_text"}})
    assert detect_family(entry_at(bare, "odd-model"), families).slug == "gemma4"
    assert detect_family(entry_at(bare, "Kimi-K2-Thinking"), families).slug == "kimi-k2-thinking"
    hub = CatalogModel(public_id="q", source="hf", location="nobody-here/Qwen3.5-9B-MLX-4bit")
    assert detect_family(hub, families).slug == "qwen3-5"  # not fetched: its name tells
    assert detect_family(entry_at(tmp_path / "missing", "odd"), families).slug == "default"


@pytest.mark.django_db
def test_detection_is_read_once_per_change_of_the_files(
    templates: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    calls = []

    def counted(template, tokens):
        calls.append(template)
        return detect(template, tokens)

    monkeypatch.setattr(catalog.families, "detect", counted)
    families = list(ModelFamily.objects.all())
    folder = model_folder(tmp_path, (templates / "Qwen3-Coder.jinja").read_text())
    entry = entry_at(folder)
    for _ in range(3):
        assert detect_family(entry, families).slug == "qwen3-coder"
    assert len(calls) == 1
    config = folder / "tokenizer_config.json"
    config.write_text(json.dumps({"chat_template": (templates / "MiniMax-M2.jinja").read_text()}))
    stat = config.stat()
    os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert detect_family(entry, families).slug == "minimax-m2"
    assert len(calls) == 2


@pytest.mark.django_db
def test_the_catalog_family_wins_and_admin_shows_both(admin_client, templates, tmp_path):
    folder = model_folder(tmp_path, (templates / "Qwen3.5-4B.jinja").read_text())
    entry = CatalogModel.objects.create(public_id="my-model", location=str(folder))
    page = admin_client.get(f"/admin/catalog/catalogmodel/{entry.pk}/change/").content.decode()
    assert "Qwen3.5 — detected: chat template writes &lt;function=" in page
    entry.family = ModelFamily.objects.get(slug="gemma")
    entry.save()
    assert detect_family(entry, list(ModelFamily.objects.all())).slug == "gemma"
    page = admin_client.get(f"/admin/catalog/catalogmodel/{entry.pk}/change/").content.decode()
    assert "Gemma 2 / 3 — chosen in the catalog (the model itself shows qwen3-5:" in page


@pytest.mark.django_db
def test_family_admin_edits_the_tool_syntax(admin_client):
    family = ModelFamily.objects.get(slug="glm-4-5")
    page = admin_client.get(f"/admin/catalog/modelfamily/{family.pk}/change/").content.decode()
    assert 'name="tool_syntax"' in page
    assert '<option value="glm" selected>' in page
    listing = admin_client.get("/admin/catalog/modelfamily/").content.decode()
    assert "qwen3_xml" in listing or "Qwen3-Coder / Qwen3.5" in listing


@pytest.mark.django_db
def test_llama4_as_its_template_prompts():
    """llama.cpp's tree has no Llama 4 template; transformers ships Meta's. It asks for, and
    writes past calls as, {"name": …, "parameters": …}: Llama 3's JSON, not pythonic."""
    from transformers.models.llama4.processing_llama4 import chat_template

    assert detect(chat_template, ()).slug == "llama4"
    family = ModelFamily.objects.get(slug="llama4")
    assert family.tool_syntax == "llama3_json"
    assert '"parameters": ' in chat_template
    assert all(stop in chat_template for stop in family.extra_stop_tokens)


def test_a_family_that_thinks_only_when_asked():
    """DeepSeek V3.1: its switch is set off when a request says nothing (a tokenizer wrapper
    may guess otherwise), and asked for, the prompt opens the thinking: the reply starts in it."""
    from inference.adapters import FamilyProfile, get_adapter
    from inference.serving.thinking import plan_thinking

    profile = FamilyProfile(
        reasoning_start="<think>",
        reasoning_end="</think>",
        reasoning_in_prompt=True,
        thinking_switch="thinking",
        thinking_by_default=False,
    )
    adapter = get_adapter(profile)
    quiet = plan_thinking(adapter, None)
    assert quiet.template_kwargs == {"thinking": False} and not quiet.thinking.opened
    asked = plan_thinking(adapter, True)
    assert asked.template_kwargs == {"thinking": True} and asked.thinking.opened
    qwen = get_adapter(
        FamilyProfile(
            reasoning_start="<think>",
            reasoning_end="</think>",
            reasoning_in_prompt=True,
            thinking_switch="enable_thinking",
        )
    )
    assert (
        plan_thinking(qwen, None).template_kwargs == {}
        and plan_thinking(qwen, None).thinking.opened
    )
