"""Human-friendly byte sizes for settings ("8GiB", "512MB", "1000000")."""

import os
import re

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    match = _SIZE.match(str(text))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _UNITS:
        raise ValueError(f"not a byte size: {text!r} (examples: 8GiB, 512MB, 1000000)")
    return int(float(match.group(1)) * _UNITS[unit])


def physical_memory() -> int:
    # sysconf answers on both Linux and macOS.
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
