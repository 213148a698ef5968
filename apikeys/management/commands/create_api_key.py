from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from apikeys.models import ApiKey
from catalog.aliases import named_by
from catalog.models import CatalogModel


class Command(BaseCommand):
    help = "Create an API key for /v1 and print its secret (shown this once only)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument(
            "--model",
            action="append",
            dest="models",
            default=[],
            help="allow only this model: its id, or a name the API takes for it (an alias)",
        )
        parser.add_argument("--max-concurrent", type=int, help="requests running at once")

    @transaction.atomic
    def handle(self, *args, name: str, models: list[str], max_concurrent: int | None, **opts):
        if ApiKey.objects.filter(name=name).exists():
            raise CommandError(f"an API key named {name!r} already exists")
        # Resolved as the API resolves a request's `model` (catalog/aliases.named_by), so the
        # key may use what its holder will ask for.
        rows = list(CatalogModel.objects.only("public_id", "aliases"))
        named = {model: named_by(model, rows) for model in models}
        missing = sorted(model for model, entry in named.items() if entry is None)
        if missing:
            raise CommandError(f"not in the catalog: {', '.join(missing)}")
        allowed = list({entry.pk: entry for entry in named.values()}.values())
        key = ApiKey(name=name, max_concurrent_requests=max_concurrent)
        secret = key.new_secret()
        key.save()
        key.allowed_models.set(allowed)
        self.stderr.write(f"created API key {name!r}; its secret follows and is not shown again:")
        self.stdout.write(secret)
