import catalog.models
from django.db import migrations, models

BILLING_HEADER = {
    "name": "Claude Code billing header",
    "pattern": r"^x-anthropic-billing-header:",
    "notes": (
        "Claude Code starts every system prompt with `x-anthropic-billing-header: "
        "cc_version=…; cc_entrypoint=…;`, which changes with its version and entry point: "
        "left in, the prefix cache misses from the first token."
    ),
}


def seed(apps, schema_editor):
    apps.get_model("catalog", "PromptMetadataPattern").objects.create(**BILLING_HEADER)


def unseed(apps, schema_editor):
    apps.get_model("catalog", "PromptMetadataPattern").objects.filter(
        name=BILLING_HEADER["name"]
    ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("catalog", "0013_aliases_context_policy"),
    ]

    operations = [
        migrations.CreateModel(
            name="PromptMetadataPattern",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=100)),
                (
                    "pattern",
                    models.CharField(
                        help_text="A Python regular expression; each line of a system message it matches (re.search) is left out of the prompt. A message left empty is dropped.",
                        max_length=500,
                        validators=[catalog.models.validate_pattern],
                    ),
                ),
                ("enabled", models.BooleanField(default=True)),
                ("notes", models.TextField(blank=True, help_text="Who sends it, and why it may go.")),
            ],
            options={"verbose_name": "prompt metadata pattern", "ordering": ["name"]},
        ),
        migrations.RunPython(seed, unseed),
    ]
