"""How a batch's state moves on the runner's side: validated into lines (or failed), lines'
outcomes written as they come, and its end: the output and error files written from the lines
(OpenAI's line format; files of purpose batch_output, owned by the batch's key) and the final
status with its time."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from batches import storage
from batches.models import Batch, BatchLine, StoredFile
from inference.batches.lines import Outcome
from inference.batches.validate import Checked, check_input
from inference.protocol.openai.batches import BatchOutputLine, LineError, LineResponse

State = BatchLine.State
Status = Batch.Status
UNDONE = {
    State.CANCELED: (
        "batch_cancelled",
        "This request was not executed because the batch was cancelled.",
    ),
    State.EXPIRED: (
        "batch_expired",
        "This request could not be executed before the completion window expired.",
    ),
}
LINES_PER_INSERT = 1000


def validate(batch: Batch) -> bool:
    """The input file checked into the batch's lines (in_progress), or the batch failed with
    its errors; True when it may run."""
    now = timezone.now()
    try:
        checked = check_input(batch.input_file_name, batch.endpoint, settings.BATCH_MAX_LINES)
    except FileNotFoundError:  # deleted after the batch was made
        message = f"The input file {batch.input_file_name} was deleted before it was read."
        error = {"code": "file_not_found", "message": message, "param": "input_file_id"}
        checked = Checked(errors=[error | {"line": None}])
    if checked.errors:
        Batch.objects.filter(pk=batch.pk, status=Status.VALIDATING).update(
            status=Status.FAILED, errors=checked.errors, failed_at=now
        )
        return False
    with transaction.atomic():
        BatchLine.objects.filter(batch=batch).delete()  # a validation the server stopped under
        BatchLine.objects.bulk_create(
            (
                BatchLine(batch=batch, index=i, custom_id=custom_id, body=body)
                for i, (custom_id, body) in enumerate(checked.lines)
            ),
            batch_size=LINES_PER_INSERT,
        )
        # Cancelled meanwhile: the lines are there to be marked, and it stays cancelling.
        Batch.objects.filter(pk=batch.pk).update(total=len(checked.lines), in_progress_at=now)
        Batch.objects.filter(pk=batch.pk, status=Status.VALIDATING).update(
            status=Status.IN_PROGRESS
        )
    return True


async def record(line: BatchLine, outcome: Outcome) -> None:
    """A line's outcome and the batch's count, together: a line is counted once."""
    state = State.SUCCEEDED if outcome.succeeded else State.ERRORED
    counter = "completed" if outcome.succeeded else "failed"

    def write() -> None:
        with transaction.atomic():
            done = BatchLine.objects.filter(pk=line.pk, state=State.PENDING).update(
                state=state,
                status_code=outcome.status_code,
                response=outcome.body,
                request_id=outcome.request_id,
                finished_at=timezone.now(),
            )
            if done:
                Batch.objects.filter(pk=line.batch_id).update(**{counter: F(counter) + 1})

    await sync_to_async(write)()


def _output_lines(batch: Batch, states: tuple[str, ...]) -> Iterator[bytes]:
    lines = BatchLine.objects.filter(batch=batch, state__in=states).order_by("index")
    for line in lines.iterator(chunk_size=500):
        if line.state in UNDONE:
            code, message = UNDONE[line.state]
            written = BatchOutputLine(
                id=f"batch_req_{secrets.token_hex(12)}",
                custom_id=line.custom_id,
                response=None,
                error=LineError(code=code, message=message),
            )
        else:
            response = LineResponse(
                status_code=line.status_code or 500, request_id=line.request_id, body=line.response
            )
            written = BatchOutputLine(
                id=f"batch_req_{secrets.token_hex(12)}", custom_id=line.custom_id, response=response
            )
        yield (json.dumps(written.model_dump(mode="json")) + "\n").encode()


def _write_file(batch: Batch, name: str, states: tuple[str, ...]) -> StoredFile | None:
    if not BatchLine.objects.filter(batch=batch, state__in=states).exists():
        return None
    row = StoredFile(
        api_key_id=batch.api_key_id,
        filename=f"{batch.id}_{name}.jsonl",
        purpose=StoredFile.Purpose.BATCH_OUTPUT,
        created_at=timezone.now(),
    )
    row.bytes = storage.write(row.id, _output_lines(batch, states))
    row.save(force_insert=True)
    return row


def end(batch_id: str, status: str) -> None:
    """The batch's last step: lines not done marked (canceled or expired), its files written
    (OpenAI's batches: output and errors), its final status and time."""
    batch = Batch.objects.get(pk=batch_id)
    now = timezone.now()
    left = {Status.CANCELLED: State.CANCELED, Status.EXPIRED: State.EXPIRED}.get(status)
    if left is not None:
        BatchLine.objects.filter(batch=batch, state=State.PENDING).update(state=left)
    if status == Status.COMPLETED:  # shown while the files are written
        Batch.objects.filter(pk=batch_id).update(status=Status.FINALIZING, finalizing_at=now)
    changes: dict = {"status": status, f"{status}_at": now}
    if batch.dialect == Batch.Dialect.OPENAI:
        output = _write_file(batch, "output", (State.SUCCEEDED,))
        errors = _write_file(batch, "error", (State.ERRORED, State.CANCELED, State.EXPIRED))
        changes |= {"output_file": output, "error_file": errors}
    Batch.objects.filter(pk=batch_id).update(**changes)
