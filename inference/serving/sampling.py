"""Request fields and catalog defaults into the engine's SamplingParams."""

from __future__ import annotations

from dataclasses import replace

from catalog.models import CatalogModel
from inference.engine.types import SamplingParams
from inference.protocol.errors import APIError
from inference.protocol.openai.common import SamplingFields


def _first(*values: float | None) -> float:
    return next(v for v in values if v is not None)


def sampling_params(
    request: SamplingFields,
    entry: CatalogModel,
    *,
    max_tokens: int | None,
    default_max_tokens: int | None = None,
    logprobs: bool = False,
    top_logprobs: int = 0,
    grammar: str | None = None,
    max_tokens_param: str = "max_tokens",  # what the dialect calls it (max_output_tokens...)
) -> SamplingParams:
    limit = entry.max_output_tokens
    if limit and max_tokens and max_tokens > limit:
        raise APIError(
            f"{max_tokens_param} is too large: {max_tokens}. This model supports at most {limit} "
            "completion tokens.",
            param=max_tokens_param,
            code="invalid_value",
        )
    # Unasked, the catalog's default applies, then the endpoint's, never past the limit.
    implicit = entry.default_max_tokens or default_max_tokens or limit
    if implicit and limit:
        implicit = min(implicit, limit)
    return SamplingParams(
        max_tokens=max_tokens or implicit,
        temperature=_first(request.temperature, entry.default_temperature, 1.0),
        top_p=_first(request.top_p, entry.default_top_p, 1.0),
        top_k=request.top_k or 0,
        min_p=request.min_p or 0.0,
        seed=request.seed,
        presence_penalty=request.presence_penalty or 0.0,
        frequency_penalty=request.frequency_penalty or 0.0,
        repetition_penalty=request.repetition_penalty or 1.0,
        logit_bias={int(k): v for k, v in (request.logit_bias or {}).items()},
        stop=tuple(request.stop or ()),
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        grammar=grammar,
    )


def per_choice(params: SamplingParams, n: int) -> list[SamplingParams]:
    """n choices must differ yet stay reproducible under a seed: choice i samples with seed+i."""
    if params.seed is None:
        return [params] * n
    return [replace(params, seed=params.seed + i) for i in range(n)]
