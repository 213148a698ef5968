"""What every drafter of speculative decoding is (drafting.py: n-gram prompt lookup and the
choice of drafter; draft_model.py: a draft model's guesses; mtp/: the model's own MTP head)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the catalog imports this module (drafting.py): no MLX at import
    import mlx.core as mx


MAX_DRAFT_TOKENS = 16  # past this a step's wasted positions cost more than drafts save


class Drafter:
    """One sequence's drafter: sees every token of the sequence, proposes what comes next."""

    costly = False  # whether proposing takes time of its own (then only what should pay)
    # The target model split into layers and output head (mtp.head.Target) when the drafter
    # guesses from its hidden states: steps then compute them and hand each row its own.
    target: Any = None
    # A drafter whose rows of one decode batch propose together: called with the first such
    # drafter, it makes what the batch asks instead, `propose(drafters, limits)` (None: each
    # row's propose()).
    group: Any = None

    def read(self, hidden: mx.array, tokens: list[int]) -> None:
        """The target's hidden states at some positions (n, width) and the n tokens that
        followed them (only for a drafter with a `target`)."""

    def extend(self, tokens: list[int]) -> None:
        """Tokens the sequence produced (accepted drafts and the model's own next token)."""
        raise NotImplementedError

    def propose(self, limit: int) -> list[int]:
        """Up to `limit` tokens likely to follow the tokens seen so far (maybe none)."""
        raise NotImplementedError
