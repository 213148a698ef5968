"""The sampling fields chat and legacy completions share (SamplingFields), as the neutral ask."""

from __future__ import annotations

from inference.protocol.openai.common import SamplingFields
from inference.serving.sampling import SamplingAsk


def sampling_ask(request: SamplingFields, **fields) -> SamplingAsk:
    """`fields`: what each endpoint says apart (max tokens, logprobs)."""
    return SamplingAsk(
        temperature=request.temperature,
        top_p=request.top_p,
        top_k=request.top_k,
        min_p=request.min_p,
        seed=request.seed,
        stop=tuple(request.stop or ()),
        presence_penalty=request.presence_penalty,
        frequency_penalty=request.frequency_penalty,
        repetition_penalty=request.repetition_penalty,
        logit_bias={int(k): v for k, v in (request.logit_bias or {}).items()},
        speculative=request.speculative,
        **fields,
    )
