"""The neutral usage as chat and legacy completions report it."""

from __future__ import annotations

from inference.protocol.openai.common import PromptTokensDetails, Usage
from inference.serving.usage import TokenUsage


def openai_usage(usage: TokenUsage) -> Usage:
    return Usage(
        prompt_tokens=usage.prompt,
        completion_tokens=usage.completion,
        total_tokens=usage.total,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=usage.cached),
        truncated_messages=usage.truncated_messages or None,
    )
