"""Mamba-2's scan one position at a time while a verification feeds several.

On a CPU mlx-lm computes a Mamba-2 layer with one function for any length (`ssm_attn`), in
chunks of 256 positions, each chunk a small attention-like matrix product: a verification's
few positions are summed in another order than the single positions of plain steps, so its
logits differ slightly (enough to move a near-tie: a greedy answer or a seeded draw that is
not the plain one). With chunks of one position, each is the plain step's own arithmetic. Only
inside `one_by_one()` (speculative.plain_numerics): prompts keep their long chunks.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mlx_lm.models import ssm

_chunked = ssm.ssm_attn
_on = False


def _scan(*args: Any, **kwargs: Any) -> Any:
    if _on:
        kwargs["step"] = 1
    return _chunked(*args, **kwargs)


ssm.ssm_attn = _scan  # ssm_update looks it up in its module at each call


@contextmanager
def one_by_one() -> Iterator[None]:
    global _on
    _on = True
    try:
        yield
    finally:
        _on = False
