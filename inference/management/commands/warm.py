from django.core.management.base import BaseCommand, CommandParser

from inference.management.control_client import (
    add_server_arguments,
    call,
    mib,
    named,
    quote,
    resolve,
    with_progress,
)


class Command(BaseCommand):
    help = "Load a catalog model into the running server's pool."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("model", help="catalog model id, or an alias the API accepts")
        add_server_arguments(parser)

    def handle(self, *args, model: str, url: str, token: str, **options) -> None:
        model_id = resolve(url, token, model, enabled_only=True)  # as the API resolves it
        result = with_progress(
            f"warming {model}",
            lambda: call(url, token, "POST", f"/control/models/{quote(model_id)}/warm"),
            lambda text: (self.stderr.write(text, ending=""), self.stderr.flush()),
        )
        name = named(model, result["id"])
        if result["already_loaded"]:
            self.stdout.write(f"{name} was already loaded ({mib(result['bytes'])}).")
        else:
            self.stdout.write(
                self.style.SUCCESS(
                    f"loaded {name} in {result['load_seconds']:.1f}s ({mib(result['bytes'])})"
                )
            )
