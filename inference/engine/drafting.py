"""Drafters for speculative decoding: cheap guesses at a sequence's next tokens.

The decode batch (decode.py) asks each speculating row's drafter for a few tokens, feeds them
with the row's next input in the shared step and keeps what the model itself would have
produced (speculative.py). A drafter only proposes: a wrong guess costs a wasted position of
the batched forward, never a different output.

`NgramDrafter` is prompt lookup: agents' edits repeat their context (a file in the prompt
written back with a change), so the tokens that followed the last few tokens' latest earlier
occurrence are a good guess. `ModelDrafter` (draft_model.py) asks a small model with the same
vocabulary (the catalog's draft model, loaded with the model it drafts for): its greedy
continuation, from a KV cache of its own per sequence that follows the sequence's accepted
tokens. `MtpDrafter` (mtp/drafter.py) asks the model's own multi-token-prediction head,
read with the model where its checkpoint ships one. Both are imported only when asked for: the
catalog imports this module, and mlx-lm's import would cost every manage.py command ~1 s.
"""

from __future__ import annotations

from typing import Any

from inference.engine.drafter import MAX_DRAFT_TOKENS, Drafter
from inference.engine.types import EngineError, ErrorKind, SamplingParams

DRAFTERS = ("ngram", "draft_model", "mtp")


class NgramDrafter(Drafter):
    """Prompt lookup over prompt + output: the last n tokens (n from `max_n` down to 1) are
    looked up among earlier positions; the tokens that followed their latest occurrence are
    the draft. While a draft keeps being right, the next draft continues from where it was
    copied (a file written back follows its original, not a look-alike line elsewhere)."""

    def __init__(self, tokens: list[int], length: int, max_n: int = 3) -> None:
        self.tokens = list(tokens)
        self.length = length
        self.max_n = max_n
        # n-gram -> position of its last token, for the latest occurrence indexed so far.
        self._latest: dict[tuple[int, ...], int] = {}
        self._indexed = 0  # end positions below this are in _latest
        self._source: int | None = None  # where the last draft's source continues

    def extend(self, tokens: list[int]) -> None:
        self.tokens.extend(tokens)
        if self._source is not None:
            self._source += len(tokens)

    def propose(self, limit: int) -> list[int]:
        limit = min(limit, self.length)
        if limit <= 0 or len(self.tokens) < 2:
            return []
        end = self._continued()
        if end is None:
            end = self._lookup()
        if end is None:
            self._source = None
            return []
        self._source = end
        return self.tokens[end + 1 : end + 1 + limit]

    def _continued(self) -> int | None:
        """The last draft's source, moved along, if the tokens there still match."""
        end, last = self._source, len(self.tokens) - 1
        if end is None or end >= last:
            return None
        n = min(self.max_n, end + 1)
        if self.tokens[end - n + 1 : end + 1] != self.tokens[last - n + 1 :]:
            return None
        return end

    def _lookup(self) -> int | None:
        """Where the longest suffix (up to max_n tokens) last occurred before the end."""
        last = len(self.tokens) - 1
        self._index(last)  # every occurrence ending before the last token
        for n in range(min(self.max_n, last), 0, -1):
            end = self._latest.get(tuple(self.tokens[last - n + 1 :]))
            if end is not None:
                return end
        return None

    def _index(self, stop: int) -> None:
        tokens, latest = self.tokens, self._latest
        for end in range(self._indexed, stop):
            for n in range(1, min(self.max_n, end + 1) + 1):
                latest[tuple(tokens[end - n + 1 : end + 1])] = end
        self._indexed = max(self._indexed, stop)


def make_drafter(
    params: SamplingParams,
    prompt: list[int],
    draft: Any = None,
    vocab_size: int = 0,
    mtp: Any = None,
    no_mtp: str = "",
) -> Drafter | None:
    """`mtp`: the model's MTP heads (mtp.head.MtpHeads), or None with `no_mtp` saying why."""
    """The drafter a request asks for (None: no speculation); a bad ask fails the request."""
    kind = params.speculative
    if not kind:
        return None
    if kind not in DRAFTERS:
        raise EngineError(
            ErrorKind.INVALID_REQUEST,
            f"speculative must be one of {', '.join(DRAFTERS)}, not {kind!r}",
            "speculative",
        )
    if not 1 <= params.draft_tokens <= MAX_DRAFT_TOKENS:
        raise EngineError(
            ErrorKind.INVALID_REQUEST,
            f"draft_tokens must be between 1 and {MAX_DRAFT_TOKENS}, not {params.draft_tokens}",
            "draft_tokens",
        )
    if kind == "ngram":
        return NgramDrafter(prompt, params.draft_tokens)
    if kind == "mtp":
        if mtp is None:
            reason = f" ({no_mtp})" if no_mtp else ""
            raise EngineError(
                ErrorKind.INVALID_REQUEST,
                f"speculative: this model has no MTP head to draft with{reason}",
                "speculative",
            )
        from inference.engine.mtp.drafter import MtpDrafter

        return MtpDrafter(mtp, params.draft_tokens, vocab_size)
    if draft is None:
        raise EngineError(
            ErrorKind.INVALID_REQUEST, "this model has no draft model in the catalog", "speculative"
        )
    from inference.engine.draft_model import ModelDrafter

    return ModelDrafter(draft, prompt, params.draft_tokens, vocab_size)
