from __future__ import annotations

import os

import uvicorn
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Serve the API with uvicorn (one worker: the model pool lives in the process)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--log-level", default="info")

    def handle(self, *args, host: str, port: int, log_level: str, **options) -> None:
        uvicorn.run(
            "config.asgi:application",
            host=host,
            port=port,
            workers=1,
            log_level=log_level,
            lifespan="off",
        )
