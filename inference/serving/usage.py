"""What a request's generation cost, in no dialect's words; each dialect's reply writer turns
it into its own usage object."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenUsage:
    prompt: int = 0  # counted once per distinct prompt: n choices share theirs
    completion: int = 0  # every choice's sampled tokens
    cached: int = 0  # prompt tokens whose KV came from the prefix cache
    truncated_messages: int = 0  # messages the catalog's truncate_middle policy left out

    @property
    def total(self) -> int:
        return self.prompt + self.completion
