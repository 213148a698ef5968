"""A llama (or Qwen3) decoder layer as three kernel primitives instead of about 28 MLX ops.

mlx-lm's llama layer, with the kernels' layers swapped in, still makes a graph node of every
reshape, transpose, cast, cache slice and residual add: about 850 per decode step of a 30-layer
model, each paying MLX's dispatch, and as many Python calls building them. A block whose parts
are all the kernels' (quantized linears without bias, RMSNorm, plain RoPE) becomes a
`FusedLlamaBlock`: the key and the value projections each write their rows straight into the
KV cache's buffer (`project_kv`, donating it as MLX's slice update would), and one
`decoder_layer` primitive computes the rest. Qwen3's blocks are llama's plus an RMSNorm of
each query and key head before RoPE (q_norm, k_norm), which the primitives take as head norms
(`FusedQwen3Block`). A block whose MLP is something else (Qwen3-MoE's mixture of experts,
`FusedQwen3MoeBlock`) has its attention fused the same way, the primitive stopping at the
attention's residual sum, and its own MLP after. The same kernels run in the same order on the
same values, so the result is bit-for-bit the per-op path's (tests compare them).

Anything else (another cache class, a cache that must grow this step, kernels turned off, a
float16 input, layers swapped back to float32 for timing) runs mlx-lm's own code unchanged.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import llama, qwen3, qwen3_moe
from mlx_lm.models.cache import BatchKVCache, KVCache

from inference.engine.cpu import layers
from inference.engine.cpu.ext import ext
from inference.engine.cpu.layers import KernelLinear, KernelRMSNorm, KernelRoPE
from inference.engine.cpu.q6k_weights import Q6KLinear
from inference.engine.cpu.status import in_use
from inference.engine.kv import Float16BatchKVCache, Float16KVCache

# Caches whose update_and_fetch writes the new rows at the write position, cast to the buffer's
# dtype (what project_kv does), and whose keys_and_values are the buffer's first rows.
_SINGLE = (KVCache, Float16KVCache)
_BATCHED = (BatchKVCache, Float16BatchKVCache)
_KV_DTYPES = (mx.float16, mx.float32)
_switch = {"on": True}
_FUSED_LINEARS = (KernelLinear, Q6KLinear)  # the linears the fused primitives take


def use_fused(on: bool) -> None:
    """Turns the fused layers on or off for later steps (tests and benchmarks compare both)."""
    _switch["on"] = on


def _parts(block: nn.Module) -> tuple | None:
    """The block's linears as the kernels take them (weight, scales, biases, group size,
    bits), norms and RoPE, when the attention's are all the kernels' (else None); the MLP's
    three are None unless they are too (a mixture of experts: the block's own MLP runs after
    the attention). One loop, no helpers: it runs for every layer of every step."""
    attn, mlp = block["self_attn"], block["mlp"]
    norm, norm_mlp = block["input_layernorm"], block["post_attention_layernorm"]
    rope = attn.get("rope")
    if type(norm) is not KernelRMSNorm or type(norm_mlp) is not KernelRMSNorm:
        return None
    if type(rope) is not KernelRoPE:
        return None
    linears = []
    for m in (attn["q_proj"], attn["k_proj"], attn["v_proj"], attn["o_proj"],
              mlp.get("gate_proj"), mlp.get("up_proj"), mlp.get("down_proj")):  # fmt: skip
        if type(m) not in _FUSED_LINEARS and m is not None:
            # A LoRA-adapted linear (engine/lora.py): its base's while no adapter row is in
            # the batch, so a batch of base rows keeps the fused path.
            m = getattr(m, "plain", None)
        if type(m) not in _FUSED_LINEARS or "bias" in m:
            break
        linears.append((m["weight"], m["scales"], m["biases"], m.group_size, m.bits))
    if len(linears) < 4:
        return None
    if len(linears) < 7:  # not a dense SwiGLU of the kernels' linears
        linears = linears[:4] + [None] * 3
    return linears, (norm, norm_mlp), rope, attn["q_proj"].x_bytes


def _fits(x: mx.array, mask: Any, cache: Any) -> bool:
    """Whether this call can take the fused path (cache class, room, dtypes, mask kind)."""
    kind = type(cache)
    if kind not in _SINGLE and kind not in _BATCHED:
        return False
    if not (_switch["on"] and in_use()) or x.dtype != mx.float32 or x.ndim != 3:
        return False
    if not (mask is None or isinstance(mask, mx.array) or mask == "causal"):
        return False
    keys, values = cache.keys, cache.values
    if keys is None or keys.dtype not in _KV_DTYPES or values.dtype not in _KV_DTYPES:
        return False
    start = cache._idx if kind in _BATCHED else cache.offset
    # A full buffer grows in mlx-lm's update_and_fetch (once per 256 steps): its path then.
    return keys.shape[0] == x.shape[0] and start + x.shape[1] <= keys.shape[2]


def _head_norms(block: nn.Module) -> dict | None:
    """Qwen3's query and key head norms as the primitives take them (None: not the kernels')."""
    attn = block["self_attn"]
    q_norm, k_norm = attn["q_norm"], attn["k_norm"]
    if type(q_norm) is not KernelRMSNorm or type(k_norm) is not KernelRMSNorm:
        return None
    return {
        "q": {"q_norm": q_norm["weight"], "q_eps": q_norm.eps},
        "k": {"head_norm": k_norm["weight"], "head_eps": k_norm.eps},
    }


_NO_HEAD_NORMS: dict = {"q": {}, "k": {}}


def _fused_call(block: nn.Module, x: mx.array, mask: Any, cache: Any, parts: tuple, heads: dict):
    """The block's output through project_kv (keys, then values) and decoder_layer."""
    (q, k, v, o, gate, up, down), (norm, norm_mlp), rope, x_bytes = parts
    attn, length = block["self_attn"], x.shape[1]
    batched = type(cache) in _BATCHED
    start = cache._idx if batched else cache.offset
    # RoPE positions of x's first row: one per batch row for a batched cache.
    offset = cache.offset if batched else mx.array(start, dtype=mx.int32)
    turn = {
        "rope_dims": rope.dims,
        "traditional": rope.traditional,
        "base": rope.base,
        "rope_scale": rope.scale,
        "x_bytes": x_bytes,  # the block's linears round their activations alike
    }
    weight = norm["weight"]
    keys = ext.project_kv(x, weight, norm.eps, k, cache.keys, start, offset, **turn, **heads["k"])
    values = ext.project_kv(x, weight, norm.eps, v, cache.values, start, offset, x_bytes=x_bytes)
    # Rebinding drops the cache's own reference, so the old buffers can be donated.
    cache.keys, cache.values = keys, values
    cache.offset = cache.offset + length
    if batched:
        cache._idx += length
    h = ext.decoder_layer(
        x, keys, values, start + length, offset, mask, weight, norm_mlp["weight"],
        q, o, gate, up, down,
        q_heads=attn.n_heads, eps_attn=norm.eps, eps_mlp=norm_mlp.eps, scale=attn.scale,
        **turn, **heads["q"],
    )  # fmt: skip
    # Without the MLP's linears the primitive stopped at the attention's residual sum.
    return h if gate is not None else h + block["mlp"](norm_mlp(h))


class _FusedBlock:
    """Both fused blocks' call: the kernels' primitives when the call fits and the block's
    parts (head norms included) are the kernels', else mlx-lm's own block (the next class in
    the method order)."""

    @staticmethod
    def head_norms(block: nn.Module) -> dict | None:
        return _NO_HEAD_NORMS

    def __call__(self, x: mx.array, mask: Any = None, cache: Any = None) -> mx.array:
        parts = _parts(self) if _fits(x, mask, cache) else None
        heads = self.head_norms(self) if parts is not None else None
        if heads is None:
            return super().__call__(x, mask, cache)
        return _fused_call(self, x, mask, cache, parts, heads)


class FusedLlamaBlock(_FusedBlock, llama.TransformerBlock):
    """mlx-lm's llama TransformerBlock (same parameters), decoding through the fused kernels."""


class FusedQwen3Block(_FusedBlock, qwen3.TransformerBlock):
    """mlx-lm's Qwen3 TransformerBlock (same parameters), decoding through the fused kernels
    with its query and key head norms."""

    head_norms = staticmethod(_head_norms)


class FusedQwen3MoeBlock(_FusedBlock, qwen3_moe.Qwen3MoeDecoderLayer):
    """mlx-lm's Qwen3-MoE decoder layer (Qwen3-30B-A3B, Qwen3-Coder): Qwen3's attention through
    the fused kernels, then its mixture of experts as mlx-lm computes it (the experts are the
    kernels' gathered products); its dense layers (mlp_only_layers) wholly fused."""

    head_norms = staticmethod(_head_norms)


# mlx-lm's block class -> its fused class.
_FUSABLE = {
    llama.TransformerBlock: FusedLlamaBlock,
    FusedLlamaBlock: FusedLlamaBlock,
    qwen3.TransformerBlock: FusedQwen3Block,
    FusedQwen3Block: FusedQwen3Block,
    qwen3_moe.Qwen3MoeDecoderLayer: FusedQwen3MoeBlock,
    FusedQwen3MoeBlock: FusedQwen3MoeBlock,
}


def install(model: nn.Module) -> Counter:
    """Makes every llama or Qwen3 block whose parts are the kernels' its fused class;
    idempotent."""
    fused = Counter()
    if ext is None or not hasattr(ext, "decoder_layer"):  # a build from before the fused layer
        return fused
    for _, module in model.named_modules():
        target = _FUSABLE.get(type(module))
        if target is None or not _parts(module) or target.head_norms(module) is None:
            continue
        module.__class__ = target
        fused[target.__name__] += 1
    return fused


def accelerate(model: nn.Module) -> Counter:
    """layers.accelerate (the kernels' layers and functions swapped in), then the llama blocks
    fused; returns what it swapped, by kind."""
    swapped = layers.accelerate(model)
    swapped.update(install(model))
    return swapped
