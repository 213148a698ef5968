from django.core.management.base import BaseCommand, CommandParser

from inference.management.control_client import add_server_arguments, call, catalog_id, mib, named

COLUMNS = ("model", "memory", "format", "active", "queued", "tok/s", "idle", "pinned")


class Command(BaseCommand):
    help = "Show the running server's model pool (or one model of it: its id or an alias)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "model", nargs="?", help="only this model: its catalog id, or an alias the API accepts"
        )
        add_server_arguments(parser)

    def handle(self, *args, model: str | None, url: str, token: str, **options) -> None:
        status = call(url, token, "GET", "/control/pool")
        models = status["models"]
        if model is not None:
            model_id = catalog_id(status["catalog"], model, enabled_only=False)
            models = [m for m in models if m["id"] == model_id]
            if not models:
                self.stdout.write(f"{named(model, model_id)} is not loaded.")
                return
        self._table(models)
        if model is not None:
            return
        self.stdout.write(
            f"\n{mib(status['used_bytes'])} of {mib(status['budget_bytes'])} budget in use; "
            f"{status['running_sequences']} sequences running."
        )
        idle = [c["id"] for c in status["catalog"] if c["enabled"] and not c["loaded"]]
        if idle:
            self.stdout.write(f"Enabled but not loaded: {', '.join(idle)}")

    def _table(self, models: list[dict]) -> None:
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
            for m in models
        ]
        widths = [max(len(str(x)) for x in column) for column in zip(COLUMNS, *rows, strict=False)]
        for row in (COLUMNS, *rows):
            self.stdout.write("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)))
        if not rows:
            self.stdout.write("(no model loaded)")
