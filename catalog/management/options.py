"""What the catalog's management commands share."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from catalog.models import ModelFamily


def family_by_slug(slug: str | None) -> ModelFamily | None:
    if slug is None:
        return None
    family = ModelFamily.objects.filter(slug=slug).first()
    if family is None:
        known = ", ".join(ModelFamily.objects.values_list("slug", flat=True))
        raise CommandError(f"unknown family {slug!r} (known: {known})")
    return family


def error_messages(error: ValidationError) -> str:
    return "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in error.message_dict.items())
