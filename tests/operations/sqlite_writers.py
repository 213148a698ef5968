"""Run as `python -m tests.operations.sqlite_writers` with VAR_DIR set: migrates a fresh file
SQLite database with the server's own settings, then 16 threads write at once as requests do
(read, then write a stored response and a model's last_used, in one transaction) and it prints
each error they met, one a line (none: nothing printed)."""

from __future__ import annotations

import os
import threading

import django

WRITERS = 16
ROUNDS = 15


def write(barrier: threading.Barrier, number: int, errors: list[str]) -> None:
    from django.db import connection, transaction
    from django.utils import timezone

    from catalog.models import CatalogModel
    from storedresponses.models import StoredResponse

    barrier.wait()
    try:
        for round_ in range(ROUNDS):
            try:
                with transaction.atomic():
                    # Read first: a deferred transaction that then writes is what gets "locked".
                    StoredResponse.objects.filter(model="m").count()
                    StoredResponse.objects.create(
                        id=f"resp_{number}_{round_}", model="m", status="completed",
                        created_at=timezone.now(), output=[{"text": "x" * 2000}],
                    )  # fmt: skip
                    CatalogModel.objects.filter(public_id="m").update(last_used=timezone.now())
            except Exception as exc:  # every failure is the finding, whatever its class
                errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        connection.close()


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    from django.core.management import call_command

    from catalog.models import CatalogModel

    call_command("migrate", verbosity=0)
    CatalogModel.objects.create(public_id="m", location="/nowhere")
    barrier, errors = threading.Barrier(WRITERS), []
    threads = [
        threading.Thread(target=write, args=(barrier, number, errors)) for number in range(WRITERS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    from storedresponses.models import StoredResponse

    for error in errors:
        print(error)
    print(f"stored {StoredResponse.objects.count()}")


if __name__ == "__main__":
    main()
