"""Every array a loaded model holds, its parameters or not.

A module's `parameters()` leaves out what its class keeps under a private name: a RoPE's
`_freqs` (Llama 3's rope scaling, YaRN, longrope), a MoE's expert-bias, buffers some model
code computes in `__init__`. Those are lazy graphs built on the thread that made the model;
MLX ties each to that thread's stream, so once the loader thread is gone the engine thread
cannot evaluate them ("There is no Stream(cpu, N) in current thread"). The loader evaluates
everything this finds before handing the model over."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn

# Plain objects (not modules) are walked only when the model code's own packages made them:
# a tokenizer or a processor holds no arrays worth the walk.
_OWNERS = ("mlx_lm.", "mlx_vlm.", "mlx_embeddings.", "inference.")


def held_arrays(*roots: Any) -> list[mx.array]:
    """The arrays reachable from `roots` through modules, containers and the model code's own
    objects, each once."""
    found: dict[int, mx.array] = {}
    seen: set[int] = set()
    stack = [r for r in roots if r is not None]
    while stack:
        node = stack.pop()
        if isinstance(node, mx.array):
            found.setdefault(id(node), node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.extend(_children(node))
    return list(found.values())


def _children(node: Any) -> list[Any]:
    if isinstance(node, dict):  # nn.Module is a dict of its arrays, lists and submodules
        children = list(node.values())
        if isinstance(node, nn.Module):
            children.extend(vars(node).values())
        return children
    if isinstance(node, list | tuple | set):
        return list(node)
    if type(node).__module__.startswith(_OWNERS) and hasattr(node, "__dict__"):
        return list(vars(node).values())
    return []


def materialize(*roots: Any) -> None:
    """Evaluates every array `roots` hold, so none stays tied to this thread's stream."""
    mx.eval(held_arrays(*roots))
