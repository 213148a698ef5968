"""mlx-lm's streaming detokenizers, minus their trimming of the reply's first space.

mlx-lm drops a leading space from the first token; HF's decode, vLLM and OpenAI keep it, and a
legacy completion of "The capital is" needs its " Paris". Their UTF-8 handling stays as is: a
character split over tokens is released only once whole.
"""

from __future__ import annotations

from mlx_lm.tokenizer_utils import (
    BPEStreamingDetokenizer,
    SPMStreamingDetokenizer,
    StreamingDetokenizer,
)


def _unchanged(text: str) -> str:
    return text


def make_detokenizer(tokenizer) -> StreamingDetokenizer:
    detokenizer = tokenizer.detokenizer  # a fresh copy each time
    if isinstance(detokenizer, BPEStreamingDetokenizer):
        detokenizer._maybe_trim_space = _unchanged
    elif isinstance(detokenizer, SPMStreamingDetokenizer):
        detokenizer.trim_space = False
    return detokenizer
