from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from storedresponses.durations import parse_duration
from storedresponses.retention import BATCH, purge_older_than


class Command(BaseCommand):
    help = (
        "Delete stored responses (POST /v1/responses) older than a duration, in batches of "
        "--batch-size rows, each batch one transaction."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than",
            metavar="DURATION",
            help="30d, 12h, 45m, 90s or seconds (default: the RESPONSES_RETENTION setting)",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=BATCH,
            metavar="ROWS",
            help=f"rows deleted per transaction (default {BATCH})",
        )

    def handle(self, *args, older_than: str | None, batch_size: int, **options) -> None:
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        if older_than is None:
            seconds = settings.RESPONSES_RETENTION
            if not seconds:
                raise CommandError(
                    "RESPONSES_RETENTION is 0 (keep forever): give --older-than to purge anyway"
                )
        else:
            try:
                seconds = parse_duration(older_than)
            except ValueError as exc:
                raise CommandError(str(exc)) from None
        count = purge_older_than(seconds, batch_size)
        self.stdout.write(self.style.SUCCESS(f"deleted {count} stored responses"))
