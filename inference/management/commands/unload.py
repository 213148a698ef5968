from django.core.management.base import BaseCommand, CommandParser

from inference.management.control_client import add_server_arguments, call, named, quote, resolve


class Command(BaseCommand):
    help = "Unload a model from the running server's pool, freeing its memory."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("model", help="catalog model id, or an alias the API accepts")
        add_server_arguments(parser)

    def handle(self, *args, model: str, url: str, token: str, **options) -> None:
        # Any catalog row, enabled or not: a model disabled while loaded is still unloaded.
        model_id = resolve(url, token, model, enabled_only=False)
        result = call(url, token, "POST", f"/control/models/{quote(model_id)}/unload")
        name = named(model, result["id"])
        if result["unloaded"]:
            self.stdout.write(self.style.SUCCESS(f"unloaded {name}"))
        else:
            self.stdout.write(f"{name} was not loaded.")
