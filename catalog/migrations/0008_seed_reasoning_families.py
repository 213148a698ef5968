from django.db import migrations

THINK = {"reasoning_start": "<think>", "reasoning_end": "</think>"}
FAMILIES = [
    {
        # Before ChatML (20): Qwen3's names and model_type would match it too.
        "slug": "qwen3",
        "name": "Qwen3 (thinking)",
        "adapter": "chatml",
        "priority": 15,
        "name_patterns": ["qwen3", "qwq"],
        "model_types": ["qwen3", "qwen3_moe"],
        "extra_stop_tokens": ["<|im_end|>"],
        "thinking_switch": "enable_thinking",
        **THINK,
    },
    {
        # Before Llama (10) and ChatML (20): the distills are named after their base models.
        "slug": "deepseek-r1",
        "name": "DeepSeek-R1 and its distills",
        "adapter": "default",
        "priority": 5,
        "name_patterns": [r"deepseek[-_ ]?r1", r"r1[-_]distill"],
        "model_types": [],
        "extra_stop_tokens": [],
        "reasoning_in_prompt": True,
        **THINK,
    },
    {
        "slug": "think",
        "name": "Generic <think> reasoning",
        "adapter": "chatml",
        "priority": 900,
        "name_patterns": [],
        "model_types": [],
        "extra_stop_tokens": ["<|im_end|>"],
        **THINK,
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
    dependencies = [("catalog", "0007_family_reasoning")]
    operations = [migrations.RunPython(seed, unseed)]
