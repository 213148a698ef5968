from pathlib import Path

import pytest

from catalog.families import detect_family
from catalog.models import CatalogModel, ModelFamily
from inference.adapters import FamilyProfile, adapter_choices, get_adapter
from inference.adapters.base import fold_system_into_first_user


class FakeTokenizer:
    eos_token_ids = {2}
    chat_template = "{{ messages }}"

    def get_vocab(self):
        return {"<|im_end|>": 2, "<|eot_id|>": 7, "<end_of_turn>": 9, "hi": 10}


def test_every_adapter_is_a_choice():
    assert {name for name, _ in adapter_choices()} == {
        "default",
        "llama3",
        "chatml",
        "mistral",
        "gemma",
        "harmony",
    }


def test_stop_tokens_are_eos_plus_family_tokens_in_vocab():
    llama = get_adapter(FamilyProfile(adapter="llama3", extra_stop_tokens=("hi", "<|missing|>")))
    assert llama.stop_token_ids(FakeTokenizer()) == {2, 7, 10}
    gemma = get_adapter(FamilyProfile(adapter="gemma"))
    assert gemma.stop_token_ids(FakeTokenizer()) == {2, 9}


def test_unknown_adapter_name_falls_back_to_default():
    adapter = get_adapter(FamilyProfile(adapter="gone"))
    assert adapter.name == "default"


def test_gemma_folds_system_into_first_user():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
    ]
    folded = get_adapter(FamilyProfile(adapter="gemma")).prepare_messages(messages)
    assert folded == [
        {"role": "user", "content": "Be brief.\n\nHi"},
        {"role": "assistant", "content": "Hello"},
    ]
    assert fold_system_into_first_user([{"role": "system", "content": "S"}]) == [
        {"role": "user", "content": "S"}
    ]


@pytest.mark.django_db
def test_seeded_families():
    families = {f.slug: f for f in ModelFamily.objects.all()}
    assert set(families) >= {  # and the families of 2026 (tests/catalog/test_family_detection.py)
        *("llama", "chatml", "mistral", "gemma", "default"),
        *("qwen3", "deepseek-r1", "think"),  # reasoning families
    }
    reasoning = {slug: f.profile() for slug, f in families.items() if f.profile().reasons}
    assert set(reasoning) >= {"qwen3", "deepseek-r1", "think"}
    assert reasoning["qwen3"].thinking_switch == "enable_thinking"
    assert reasoning["deepseek-r1"].reasoning_in_prompt
    assert "<|eot_id|>" in families["llama"].extra_stop_tokens
    assert families["chatml"].extra_stop_tokens == ["<|im_end|>"]
    assert families["gemma"].extra_stop_tokens == ["<end_of_turn>"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("public_id", "model_type", "expected"),
    [
        ("qwen2.5-7b", "qwen2", "chatml"),
        ("my-model", "qwen3", "qwen3"),
        ("Qwen3-4B-Instruct", "qwen3", "qwen3"),
        ("DeepSeek-R1-Distill-Qwen-1.5B", "qwen2", "deepseek-r1"),
        ("DeepSeek-R1-Distill-Llama-8B", "llama", "deepseek-r1"),
        ("Meta-Llama-3-8B", "llama", "llama"),
        ("gemma-2b", "gemma", "gemma"),
        ("odd-model", "unknown_arch", "default"),
    ],
)
def test_family_detection(tmp_path: Path, public_id, model_type, expected):
    (tmp_path / "config.json").write_text(f'{{"model_type": "{model_type}"}}')
    entry = CatalogModel(public_id=public_id, location=str(tmp_path))
    family = detect_family(entry, list(ModelFamily.objects.all()))
    assert family.slug == expected


@pytest.mark.django_db
def test_explicit_family_wins():
    gemma = ModelFamily.objects.get(slug="gemma")
    entry = CatalogModel(public_id="qwen-named", location="/nowhere", family=gemma)
    assert detect_family(entry, list(ModelFamily.objects.all())) == gemma
