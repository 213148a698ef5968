from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import threading

import uvicorn
from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor

from apikeys.models import ApiKey
from inference.batches.runner import start_batch_runner, stop_batch_runner
from inference.runtime import engine_handle, stop_engine
from inference.serving.control import preload_models
from inference.serving.drain import drain
from storedresponses.retention import start_purge_timer

log = logging.getLogger(__name__)


def on_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 (bracketed or not) and localhost; any other name or address, 0.0.0.0
    and :: included, may be reached from the network."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


class DrainingServer(uvicorn.Server):
    """uvicorn, plus: on the first SIGTERM/SIGINT running generations get DRAIN_TIMEOUT to
    finish before they end with an error event (uvicorn alone would cut them mid-stream),
    and the engine stops once every connection is closed."""

    async def startup(self, sockets=None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    def handle_exit(self, sig, frame) -> None:
        if not self.should_exit and hasattr(self, "_loop"):
            self._loop.call_soon_threadsafe(self._begin_drain)
        super().handle_exit(sig, frame)

    def _begin_drain(self) -> None:
        running = drain.begin(settings.DRAIN_TIMEOUT)
        log.warning(
            "shutting down: %d generation(s) running get %.0f s to finish",
            running,
            settings.DRAIN_TIMEOUT,
        )

    async def shutdown(self, sockets=None) -> None:
        await super().shutdown(sockets)
        # Batch lines still running finish (and are stored) before the engine stops.
        await asyncio.to_thread(stop_batch_runner, settings.DRAIN_TIMEOUT)
        await asyncio.to_thread(stop_engine)


class Command(BaseCommand):
    help = "Serve the API with uvicorn (one worker: the model pool lives in the process)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--log-level", default="info")
        parser.add_argument(
            "--follower",
            action="store_true",
            help="Run as a follower rank of an MLX distributed group (started by mlx.launch "
            "beside rank 0's server): no HTTP, no database; it runs the turns rank 0 sends.",
        )

    def handle(
        self, *args, host: str, port: int, log_level: str, follower: bool, **options
    ) -> None:
        link = self._join_group()
        if follower:
            self._follow(link)
            return
        if link is not None and link.rank:
            raise CommandError(
                f"this is rank {link.rank} of an MLX group: ranks above 0 run "
                "`manage.py serve --follower`"
            )
        self._require_migrated()
        self._refuse_if_open(host)
        # Preloading runs beside the server starting up; requests meanwhile queue behind it.
        threading.Thread(target=self._preload, name="preload", daemon=True).start()
        start_purge_timer()  # stored responses past RESPONSES_RETENTION, off the request path
        start_batch_runner()  # the Batch API's lines, and expired files swept
        config = uvicorn.Config(
            "config.asgi:application",
            host=host,
            port=port,
            workers=1,
            log_level=log_level,
            lifespan="off",
            # Past this many connections uvicorn answers 503 at once, before the app runs,
            # instead of taking every socket it is offered (0: no limit).
            limit_concurrency=settings.SERVER_MAX_CONNECTIONS or None,
            # Our drain ends every stream by DRAIN_TIMEOUT; uvicorn's cut is the backstop.
            timeout_graceful_shutdown=int(settings.DRAIN_TIMEOUT) + 5,
        )
        DrainingServer(config).run()

    def _join_group(self):
        """This process's place in an MLX distributed group, if a launcher started it in one
        (the engine then runs in lockstep with the other ranks: engine/lockstep.py)."""
        from inference.engine import lockstep

        # A backend named in the settings asks to join even without a launcher's variables.
        if lockstep.launched_backend() is None and settings.DISTRIBUTED_BACKEND == "any":
            return None
        secret = settings.DISTRIBUTED_SECRET.encode()
        try:  # before joining: the other ranks would wait on this one
            lockstep.check_secret(secret)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        link = lockstep.join(settings.DISTRIBUTED_BACKEND, secret)
        lockstep.set_link(link)
        return link

    def _follow(self, link) -> None:
        if link is None or not link.rank:
            raise CommandError(
                "--follower runs on ranks above 0 of an MLX group: start it with mlx.launch "
                "(or MLX_RANK and MLX_HOSTFILE), beside rank 0's `manage.py serve`"
            )
        from inference.engine.worker import Engine
        from inference.runtime import engine_config

        log.info("following rank 0 as rank %d of %d", link.rank, link.size)
        engine = Engine(engine_config(), link)
        engine.join()
        if engine.failure:
            raise CommandError(f"rank {link.rank} stopped: {engine.failure}")

    def _require_migrated(self) -> None:
        """Serving an old schema fails on every request; say so before starting instead."""
        executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
        if pending:
            names = ", ".join(f"{m.app_label}.{m.name}" for m, _ in pending)
            raise CommandError(f"unapplied migrations ({names}): run `manage.py migrate` first")

    def _refuse_if_open(self, host: str) -> None:
        """Anyone who can reach a network address could use /v1 while it takes no key: the
        operator has to ask for that by name. Loopback (the demo) needs no key."""
        if on_loopback(host) or settings.ALLOW_ANONYMOUS_ON_NETWORK:
            return
        if settings.REQUIRE_API_KEY or ApiKey.objects.exists():
            return
        raise CommandError(
            f"refusing to serve on {host} without API keys: anyone who can reach this port "
            "could use /v1. Create a key (`manage.py create_api_key NAME`, or the admin's "
            "API keys), or set REQUIRE_API_KEY=true, or serve on 127.0.0.1; on a trusted "
            "network, ALLOW_ANONYMOUS_ON_NETWORK=true serves without keys."
        )

    def _preload(self) -> None:
        failed = async_to_sync(preload_models)(engine_handle())
        for model_id in failed:
            self.stderr.write(f"could not preload {model_id}; see the log above")
