"""Per-request metadata kept out of prompts: lines of system messages that change from request
to request and tell the model nothing (Claude Code's `x-anthropic-billing-header: …`), as the
catalog's PromptMetadataPattern rows name them. Left in, the prefix cache would miss from the
first token of every agent turn."""

from __future__ import annotations

import re
from functools import lru_cache

from catalog.models import PromptMetadataPattern


async def metadata_patterns() -> tuple[re.Pattern, ...]:
    """The enabled patterns; read on every request, so admin edits apply at once."""
    rows = PromptMetadataPattern.objects.filter(enabled=True).values_list("pattern", flat=True)
    return tuple([_compiled(pattern) async for pattern in rows])


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern:
    return re.compile(pattern)


def without_metadata(messages: list[dict], patterns: tuple[re.Pattern, ...]) -> list[dict]:
    """The messages with every system line a pattern matches left out; a system message left
    with nothing is dropped."""
    if not patterns:
        return messages
    out = []
    for message in messages:
        content = message.get("content")
        if message.get("role") == "system" and isinstance(content, str):
            kept = [line for line in content.split("\n") if not _matches(line, patterns)]
            text = "\n".join(kept).strip("\n")
            if not text.strip():
                continue
            message = {**message, "content": text}
        out.append(message)
    return out


def _matches(line: str, patterns: tuple[re.Pattern, ...]) -> bool:
    return any(pattern.search(line) for pattern in patterns)
