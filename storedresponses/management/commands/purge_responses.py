from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from storedresponses.durations import parse_duration
from storedresponses.retention import purge_older_than


class Command(BaseCommand):
    help = "Delete stored responses (POST /v1/responses) older than a duration."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than",
            metavar="DURATION",
            help="30d, 12h, 45m, 90s or seconds (default: the RESPONSES_RETENTION setting)",
        )

    def handle(self, *args, older_than: str | None, **options) -> None:
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
        count = purge_older_than(seconds)
        self.stdout.write(self.style.SUCCESS(f"deleted {count} stored responses"))
