"""What identifies a model's weights on disk: the files beside its config, with their sizes and
times. A replaced or re-downloaded file changes it; the prefix cache's disk tier and the kept
compute-format verdicts key on it."""

from __future__ import annotations

import os
from pathlib import Path


def weight_files(location: str, from_hub: bool) -> list[tuple[str, int, int]]:
    """(name, size, mtime) of the files beside the model's config (a hub model's in the local
    cache); none when they cannot be listed."""
    folder = Path(location)
    if from_hub:
        try:
            from huggingface_hub import try_to_load_from_cache

            found = try_to_load_from_cache(location, "config.json")
        except Exception:
            found = None
        if not isinstance(found, str):
            return []
        folder = Path(found).parent
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
        return [(e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in entries if e.is_file()]
    except OSError:
        return []
