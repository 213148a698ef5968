"""JSON kept as ASCII text, for whatever a client sent us.

PostgreSQL's jsonb refuses the escape \\u0000 and its text type refuses NUL characters, yet a
client may put either (or a lone surrogate) in any string of a request. `json.dumps` writes all
of them as plain ASCII escapes, which every database stores and gives back unchanged."""

from __future__ import annotations

import json
from typing import Any

from django.db import models


class JSONText(models.TextField):
    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> Any:
        return None if value is None else json.loads(value)

    def get_prep_value(self, value: Any) -> str | None:
        return None if value is None else json.dumps(value)
