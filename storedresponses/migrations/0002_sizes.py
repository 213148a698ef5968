"""stored_bytes and items_bytes: what each response weighs, for the per-key quota and the
previous_response_id chain walk; responses stored before are measured in the database (their
JSON text is ASCII: its length is its size in bytes)."""

from django.db import migrations, models
from django.db.models import Value
from django.db.models.functions import Coalesce, Length

JSON_COLUMNS = (
    "instructions",
    "metadata",
    "tools",
    "tool_choice",
    "text",
    "reasoning",
    "user",
    "input_items",
    "output",
    "usage",
    "incomplete_details",
    "error",
)


def size_of(*columns: str):
    total = Value(0)
    for name in columns:
        total = total + Coalesce(Length(name), Value(0))
    return total


def measure_existing(apps, schema_editor) -> None:
    StoredResponse = apps.get_model("storedresponses", "StoredResponse")
    StoredResponse.objects.update(
        stored_bytes=size_of(*JSON_COLUMNS), items_bytes=size_of("input_items", "output")
    )


class Migration(migrations.Migration):
    dependencies = [
        ("storedresponses", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="storedresponse",
            name="items_bytes",
            field=models.PositiveBigIntegerField(default=0, editable=False),
        ),
        migrations.AddField(
            model_name="storedresponse",
            name="stored_bytes",
            field=models.PositiveBigIntegerField(default=0, editable=False),
        ),
        migrations.RunPython(measure_existing, migrations.RunPython.noop),
    ]
