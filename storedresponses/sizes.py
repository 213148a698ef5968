"""How much stored responses weigh: the length of their JSON text as the database keeps it
(fields.JSONText writes ASCII, so characters are bytes; a row measures itself when saved,
StoredResponse.measure), and each key's total."""

from __future__ import annotations

import json
from typing import Any

from django.db.models import Sum

from storedresponses.models import StoredResponse


def json_bytes(value: Any) -> int:
    """The stored size of one value (an item, a column's content): what JSONText writes."""
    return len(json.dumps(value))


def stored_by(api_key_id: int | None) -> int:
    """Bytes stored for one key; None is the anonymous callers' shared scope."""
    rows = StoredResponse.objects.filter(api_key_id=api_key_id)
    return rows.aggregate(total=Sum("stored_bytes"))["total"] or 0
