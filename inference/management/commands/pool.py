from django.core.management.base import BaseCommand, CommandParser

from inference.management.control_client import add_server_arguments, call, mib

COLUMNS = ("model", "memory", "format", "active", "queued", "tok/s", "idle", "pinned")


class Command(BaseCommand):
    help = "Show the running server's model pool."

    def add_arguments(self, parser: CommandParser) -> None:
        add_server_arguments(parser)

    def handle(self, *args, url: str, token: str, **options) -> None:
        status = call(url, token, "GET", "/control/pool")
        rows = [
            (
                m["id"],
                mib(m["bytes"]),
                m["compute_format"],
                str(m["active_sequences"]),
                str(m["queued_sequences"]),
                f"{m['tokens_per_second']:.1f}",
                f"{m['idle_seconds']:.0f}s",
                "yes" if m["pinned"] else "",
            )
            for m in status["models"]
        ]
        widths = [max(len(str(x)) for x in column) for column in zip(COLUMNS, *rows, strict=False)]
        for row in (COLUMNS, *rows):
            self.stdout.write("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)))
        if not rows:
            self.stdout.write("(no model loaded)")
        self.stdout.write(
            f"\n{mib(status['used_bytes'])} of {mib(status['budget_bytes'])} budget in use; "
            f"{status['running_sequences']} sequences running."
        )
        idle = [c["id"] for c in status["catalog"] if c["enabled"] and not c["loaded"]]
        if idle:
            self.stdout.write(f"Enabled but not loaded: {', '.join(idle)}")
