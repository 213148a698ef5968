"""Drafters for speculative decoding: cheap guesses at a sequence's next tokens.

The decode batch (decode.py) asks each speculating row's drafter for a few tokens, feeds them
with the row's next input in the shared step and keeps what the model itself would have
produced (speculative.py). A drafter only proposes: a wrong guess costs a wasted position of
the batched forward, never a different output.

`NgramDrafter` is prompt lookup: agents' edits repeat their context (a file in the prompt
written back with a change), so the tokens that followed the last few tokens' latest earlier
occurrence are a good guess. `ModelDrafter` asks a small model with the same vocabulary (the
catalog's draft model, loaded with the model it drafts for): its greedy continuation, from a
KV cache of its own per sequence that follows the sequence's accepted tokens.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache

from inference.engine.types import EngineError, ErrorKind, SamplingParams

DRAFTERS = ("ngram", "draft_model")
MAX_DRAFT_TOKENS = 16  # past this a step's wasted positions cost more than drafts save
DRAFT_CHUNK = 256  # tokens a draft model catches up on per step (a prompt over several)


class Drafter:
    """One sequence's drafter: sees every token of the sequence, proposes what comes next."""

    costly = False  # whether proposing takes time of its own (then only what should pay)

    def extend(self, tokens: list[int]) -> None:
        """Tokens the sequence produced (accepted drafts and the model's own next token)."""
        raise NotImplementedError

    def propose(self, limit: int) -> list[int]:
        """Up to `limit` tokens likely to follow the tokens seen so far (maybe none)."""
        raise NotImplementedError


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


class ModelDrafter(Drafter):
    """A draft model's greedy guesses. Its cache holds the K/V of `cached`, which always
    starts with the sequence's tokens: after a step, the part the target rejected is cut off
    and the accepted tokens not yet read are read with the next proposal. A greedy draft puts
    all its probability on its token, the case the verification's acceptance rule assumes
    (speculative.py), so sampled rows keep the target's distribution."""

    costly = True

    def __init__(self, model: Any, tokens: list[int], length: int, vocab_size: int) -> None:
        self.model = model
        self.tokens = list(tokens)
        self.length = length
        self.vocab_size = vocab_size  # the target's: a draft id past it is never proposed
        self.cache = make_prompt_cache(model)
        self.cached: list[int] = []  # tokens whose K/V the cache holds, in order

    def extend(self, tokens: list[int]) -> None:
        self.tokens.extend(tokens)

    def propose(self, limit: int) -> list[int]:
        limit = min(limit, self.length)
        if limit <= 0 or not self._catch_up():
            return []
        token, draft = self.tokens[-1], []
        for _ in range(limit):
            logits = self.model(mx.array([[token]]), cache=self.cache)
            self.cached.append(token)
            token = int(mx.argmax(logits[0, -1]).item())
            if token >= self.vocab_size:
                break
            draft.append(token)
        return draft

    def _catch_up(self) -> bool:
        """The cache cut back to where it agrees with the sequence, then fed the sequence's
        tokens up to (not with) its last, which the next proposal starts from: at most
        DRAFT_CHUNK of them per step, so that reading a long prompt never holds up the other
        rows' step for long (no draft until it is read). Whether it is caught up."""
        target = self.tokens[:-1]
        agree = 0
        for mine, theirs in zip(self.cached, target, strict=False):  # either may be longer
            if mine != theirs:
                break
            agree += 1
        extra = len(self.cached) - agree
        if extra and not can_trim_prompt_cache(self.cache):  # a rotated window: read anew
            self.cache, self.cached, agree, extra = make_prompt_cache(self.model), [], 0, 0
        if extra:
            trim_prompt_cache(self.cache, extra)
            del self.cached[agree:]
        chunk = target[agree : agree + DRAFT_CHUNK]
        if chunk:
            self.model(mx.array([chunk]), cache=self.cache)
            mx.eval([c.state for c in self.cache])
            self.cached.extend(chunk)
        return len(self.cached) == len(target)


def make_drafter(
    params: SamplingParams, prompt: list[int], draft: Any = None, vocab_size: int = 0
) -> Drafter | None:
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
    if draft is None:
        raise EngineError(
            ErrorKind.INVALID_REQUEST, "this model has no draft model in the catalog", "speculative"
        )
    return ModelDrafter(draft, prompt, params.draft_tokens, vocab_size)
