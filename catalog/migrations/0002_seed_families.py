from django.db import migrations

FAMILIES = [
    {
        "slug": "llama",
        "name": "Llama 3",
        "adapter": "llama3",
        "priority": 10,
        "name_patterns": [r"llama[-_ ]?3"],
        "model_types": ["llama"],
        "extra_stop_tokens": ["<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"],
    },
    {
        "slug": "chatml",
        "name": "ChatML / Qwen",
        "adapter": "chatml",
        "priority": 20,
        "name_patterns": ["qwen", "smollm", "hermes", "chatml"],
        "model_types": ["qwen2", "qwen2_moe", "qwen3", "qwen3_moe"],
        "extra_stop_tokens": ["<|im_end|>"],
    },
    {
        "slug": "mistral",
        "name": "Mistral",
        "adapter": "mistral",
        "priority": 30,
        "name_patterns": ["mistral", "mixtral", "ministral"],
        "model_types": ["mistral", "mixtral"],
        "extra_stop_tokens": [],
    },
    {
        "slug": "gemma",
        "name": "Gemma",
        "adapter": "gemma",
        "priority": 40,
        "name_patterns": ["gemma"],
        "model_types": ["gemma", "gemma2", "gemma3", "gemma3_text"],
        "extra_stop_tokens": ["<end_of_turn>"],
    },
    {
        "slug": "default",
        "name": "Default",
        "adapter": "default",
        "priority": 1000,
        "name_patterns": [],
        "model_types": [],
        "extra_stop_tokens": [],
    },
]


def seed(apps, schema_editor):
    ModelFamily = apps.get_model("catalog", "ModelFamily")
    for family in FAMILIES:
        ModelFamily.objects.update_or_create(slug=family["slug"], defaults=family)


def unseed(apps, schema_editor):
    ModelFamily = apps.get_model("catalog", "ModelFamily")
    ModelFamily.objects.filter(slug__in=[f["slug"] for f in FAMILIES]).delete()


class Migration(migrations.Migration):
    dependencies = [("catalog", "0001_initial")]
    operations = [migrations.RunPython(seed, unseed)]
