from __future__ import annotations

import os
import threading

import uvicorn
from asgiref.sync import async_to_sync
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor

from inference.serving.control import preload_models


class Command(BaseCommand):
    help = "Serve the API with uvicorn (one worker: the model pool lives in the process)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--log-level", default="info")

    def handle(self, *args, host: str, port: int, log_level: str, **options) -> None:
        self._require_migrated()
        # Preloading runs beside the server starting up; requests meanwhile queue behind it.
        threading.Thread(target=self._preload, name="preload", daemon=True).start()
        uvicorn.run(
            "config.asgi:application",
            host=host,
            port=port,
            workers=1,
            log_level=log_level,
            lifespan="off",
        )

    def _require_migrated(self) -> None:
        """Serving an old schema fails on every request; say so before starting instead."""
        executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
        if pending:
            names = ", ".join(f"{m.app_label}.{m.name}" for m, _ in pending)
            raise CommandError(f"unapplied migrations ({names}): run `manage.py migrate` first")

    def _preload(self) -> None:
        failed = async_to_sync(preload_models)()
        for model_id in failed:
            self.stderr.write(f"could not preload {model_id}; see the log above")
