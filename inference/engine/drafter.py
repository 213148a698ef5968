"""What every drafter of speculative decoding is (drafting.py: n-gram prompt lookup and the
choice of drafter; draft_model.py: a draft model's guesses)."""

from __future__ import annotations


class Drafter:
    """One sequence's drafter: sees every token of the sequence, proposes what comes next."""

    costly = False  # whether proposing takes time of its own (then only what should pay)

    def extend(self, tokens: list[int]) -> None:
        """Tokens the sequence produced (accepted drafts and the model's own next token)."""
        raise NotImplementedError

    def propose(self, limit: int) -> list[int]:
        """Up to `limit` tokens likely to follow the tokens seen so far (maybe none)."""
        raise NotImplementedError
