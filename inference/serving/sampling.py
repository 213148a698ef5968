"""What a request asks of sampling, in no dialect's words, and the catalog's defaults: the
engine's SamplingParams. Each dialect's plan builder maps its body's fields into a SamplingAsk;
nothing here knows a dialect's wire model."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from catalog.models import CatalogModel
from inference.engine.types import SamplingParams
from inference.protocol.errors import APIError
from inference.protocol.wire import Speculative, SpeculativeOptions


@dataclass(frozen=True)
class SamplingAsk:
    """The sampling fields a request set; None (or empty) where it left one out."""

    max_tokens: int | None = None
    max_tokens_param: str = "max_tokens"  # what the dialect calls it (max_output_tokens...)
    # Past the model's limit: a 400 naming max_tokens_param, or, where clients routinely ask
    # for more than a local model gives (Messages: Claude Code asks for tens of thousands),
    # cut to the limit, so a reply cut there stops as one cut by max_tokens.
    cut_to_limit: bool = False
    # The endpoint's own default, after the catalog's (legacy completions' 16 tokens).
    default_max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[int, float] = field(default_factory=dict)
    logprobs: bool = False
    top_logprobs: int = 0
    speculative: Speculative | None = None  # None: the catalog's default


def speculation(ask: SamplingAsk, entry: CatalogModel) -> tuple[str, int]:
    """The drafter ("" for none) and its draft length: the request's, else the catalog's."""
    asked, draft_tokens = ask.speculative, None
    if isinstance(asked, SpeculativeOptions):
        asked, draft_tokens = asked.method, asked.num_speculative_tokens
    method = asked if asked is not None else entry.speculative
    if method == "draft_model" and entry.draft_model_id is None:
        raise APIError(
            f"speculative: the model '{entry.public_id}' has no draft model (set one in the "
            "catalog, or ask for ngram).",
            param="speculative",
            code="invalid_value",
        )
    return ("" if method == "off" else method), draft_tokens or entry.draft_tokens


def _first(*values: float | None) -> float:
    return next(v for v in values if v is not None)


def max_tokens(ask: SamplingAsk, entry: CatalogModel) -> int | None:
    """What the request asked, within the model's limit; unasked, the catalog's default, then
    the endpoint's, never past the limit."""
    limit, asked = entry.max_output_tokens, ask.max_tokens
    if limit and asked and asked > limit:
        if ask.cut_to_limit:
            return limit
        raise APIError(
            f"{ask.max_tokens_param} is too large: {asked}. This model supports at most {limit} "
            "completion tokens.",
            param=ask.max_tokens_param,
            code="invalid_value",
        )
    implicit = entry.default_max_tokens or ask.default_max_tokens or limit
    if implicit and limit:
        implicit = min(implicit, limit)
    return asked or implicit


def sampling_params(
    ask: SamplingAsk, entry: CatalogModel, grammar: str | None = None
) -> SamplingParams:
    """The catalog's defaults fill what the request leaves out (temperature, top_p,
    speculation)."""
    drafter, draft_tokens = speculation(ask, entry)
    return SamplingParams(
        max_tokens=max_tokens(ask, entry),
        temperature=_first(ask.temperature, entry.default_temperature, 1.0),
        top_p=_first(ask.top_p, entry.default_top_p, 1.0),
        top_k=ask.top_k or 0,
        min_p=ask.min_p or 0.0,
        seed=ask.seed,
        presence_penalty=ask.presence_penalty or 0.0,
        frequency_penalty=ask.frequency_penalty or 0.0,
        repetition_penalty=ask.repetition_penalty or 1.0,
        logit_bias=dict(ask.logit_bias),
        stop=ask.stop,
        logprobs=ask.logprobs,
        top_logprobs=ask.top_logprobs,
        grammar=grammar,
        speculative=drafter,
        draft_tokens=draft_tokens,
    )


def per_choice(params: SamplingParams, n: int) -> list[SamplingParams]:
    """n choices must differ yet stay reproducible under a seed: choice i samples with seed+i."""
    if params.seed is None:
        return [params] * n
    return [replace(params, seed=params.seed + i) for i in range(n)]
