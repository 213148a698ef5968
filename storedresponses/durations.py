"""Durations as people write them in settings and on the command line: "30d", "12h", "45m",
"90s" or a bare number of seconds. Pure Python: config/settings.py imports it."""

from __future__ import annotations

import re

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)


def parse_duration(text: str) -> float:
    """Seconds; raises ValueError for anything else (negative numbers included)."""
    match = _DURATION.match(str(text))
    if match is None:
        raise ValueError(
            f"{text!r} is not a duration (examples: 30d, 12h, 45m, 90s, 3600 for seconds)"
        )
    number, unit = match.groups()
    return float(number) * UNITS[unit.lower() or "s"]
