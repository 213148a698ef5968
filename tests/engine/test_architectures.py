"""The architecture matrix's models (tests/support/architectures.py): each 4-bit folder loads with
mlx_lm.load, decodes greedily with finite logits and more than one token, and really has every
layer kind its entry lists (linear and full attention, sliding and global, chunked, MoE, MLA,
shared KV), so that tests run over the matrix exercise what they claim to."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten
from mlx_lm import load
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import (
    ArraysCache,
    ChunkedKVCache,
    KVCache,
    RotatingKVCache,
    make_prompt_cache,
)
from mlx_lm.models.switch_layers import QuantizedSwitchLinear, SwitchLinear
from mlx_lm.sample_utils import make_sampler

from tests.support.architectures import ARCHITECTURES, WINDOW

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

# About 100 tokens: past every sliding window (16) and llama4 attention chunk (32).
PROMPT = (
    "Alice went to the market on Monday to buy apples, bread, cheese and a small bottle of "
    "olive oil. On the way home she met her neighbour Bob, who told her about the storm "
    "expected later that week. "
) * 3


def is_global(cache) -> bool:
    """A full-attention cache: KVCache itself, not one of its windowed kinds."""
    return type(cache) is KVCache


def has_switch_layers(module) -> bool:
    return any(
        isinstance(m, SwitchLinear | QuantizedSwitchLinear) for _, m in module.named_modules()
    )


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_the_architecture_loads_decodes_and_has_its_layer_kinds(name, architecture_dir):
    arch = ARCHITECTURES[name]
    model, tokenizer = load(str(architecture_dir(name)))
    prompt = tokenizer.encode(PROMPT)
    assert len(prompt) > 2 * WINDOW

    cache = make_prompt_cache(model)
    steps = generate_step(
        mx.array(prompt), model, max_tokens=8, sampler=make_sampler(0.0), prompt_cache=cache
    )
    tokens = []
    for token, logprobs in steps:
        assert mx.all(mx.isfinite(logprobs)).item(), f"{name}: non-finite logits"
        tokens.append(int(token))
    assert len(tokens) == 8
    assert len(set(tokens)) >= 2, f"{name} repeats one token: {tokens}"

    kinds = set(arch.kinds)
    assert arch.kind in kinds
    if "hybrid" in kinds:  # recurrent (SSM, conv, linear attention) and attention layers
        assert any(isinstance(c, ArraysCache) for c in cache)
        assert any(isinstance(c, KVCache) for c in cache)
    if "sliding" in kinds:  # windowed and global layers, the window crossed by the prompt
        rotating = [c for c in cache if isinstance(c, RotatingKVCache)]
        assert rotating and any(is_global(c) for c in cache)
        assert all(c.max_size == WINDOW and c.offset > WINDOW for c in rotating)
    if "chunked" in kinds:
        assert any(isinstance(c, ChunkedKVCache) for c in cache)
        assert any(is_global(c) for c in cache)
    if "shared_kv" in kinds:  # later layers read earlier layers' caches
        assert len(cache) < len(model.layers)
    if "mla" in kinds:  # one latent "head" cached, not per-head keys
        assert any(path.endswith("kv_a_proj_with_mqa.weight") for path, _ in _parameters(model))
        assert any(is_global(c) and c.keys.shape[1] == 1 for c in cache)
    if "moe" in kinds:
        assert has_switch_layers(model)
        config = arch.config.get("text_config", arch.config)
        if config.get("first_k_dense_replace"):  # DeepSeek-style dense first layer
            assert not has_switch_layers(model.layers[0])
    else:
        assert not has_switch_layers(model)
    if kinds == {"dense"}:
        assert all(is_global(c) for c in cache)


def _parameters(model) -> list[tuple[str, mx.array]]:
    return tree_flatten(model.parameters())
