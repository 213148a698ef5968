"""The fused llama, Qwen3 and Qwen3-MoE layers (cpu/fused.py: the kernels' project_kv and
decoder_layer, Qwen3's with its query and key head norms, Qwen3-MoE's attention before its
experts) give the per-op path's logits bit for bit: one sequence and a left-padded batch,
float16 and float32 K/V, prompts read in chunks (causal masks), decode across a cache buffer's
growth (which takes mlx-lm's path), and two caches sharing one buffer (no write may reach the
other)."""

from __future__ import annotations

import copy

import cpu_kernels as ck
import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.models import llama, qwen3, qwen3_moe
from mlx_lm.models.cache import BatchKVCache, KVCache

from inference.engine import cpu
from inference.engine.cpu import layers
from inference.engine.cpu.fused import FusedLlamaBlock, FusedQwen3Block, FusedQwen3MoeBlock
from inference.engine.kv import Float16BatchKVCache, Float16KVCache

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

ISAS = [isa for isa in ("avx512", "avx2", "generic") if ck.use_isa(isa)]
ck.use_isa(ISAS[0])

ARGS = {
    "model_type": "llama",
    "hidden_size": 256,
    "num_hidden_layers": 2,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5,
    "vocab_size": 512,
    "tie_word_embeddings": True,
}


# Qwen3: llama's shape with explicit head size, and a query and key RMSNorm per head.
QWEN3_ARGS = {**ARGS, "model_type": "qwen3", "head_dim": 64, "rope_theta": 1e6,
              "max_position_embeddings": 4096}  # fmt: skip
# Qwen3-MoE: Qwen3's attention, a mixture of experts after it (its own code, the experts the
# kernels' gathered products); layer 1 dense (mlp_only_layers), wholly fused.
QWEN3_MOE_ARGS = {**QWEN3_ARGS, "model_type": "qwen3_moe", "num_experts": 8,
                  "num_experts_per_tok": 2, "moe_intermediate_size": 128,
                  "decoder_sparse_step": 1, "mlp_only_layers": [1],
                  "norm_topk_prob": True}  # fmt: skip
FAMILIES = {
    "llama": (llama, ARGS, FusedLlamaBlock),
    "qwen3": (qwen3, QWEN3_ARGS, FusedQwen3Block),
    "qwen3_moe": (qwen3_moe, QWEN3_MOE_ARGS, FusedQwen3MoeBlock),
}


def build(bits: int, family: str = "llama") -> nn.Module:
    mx.random.seed(bits)
    module, args, fused_class = FAMILIES[family]
    model = module.Model(module.ModelArgs.from_dict(args))
    for block in model.model.layers:  # head norms that are not all ones: a mix-up shows
        for name in ("q_norm", "k_norm"):
            if name in block.self_attn:
                norm = block.self_attn[name]
                norm.weight = mx.random.uniform(0.5, 1.5, norm.weight.shape)
    nn.quantize(model, group_size=64, bits=bits)
    assert cpu.kernel_status().available, cpu.kernel_status().reason
    swapped = cpu.accelerate(model)
    assert swapped[fused_class.__name__] == args["num_hidden_layers"]
    return model


@pytest.fixture(scope="module", params=ISAS)
def isa(request):
    """Each instruction set's kernels (the integer path included, from its row threshold),
    the model built under them: its linears' layout is the one they read (x8 on AVX-512 VNNI)."""
    assert ck.use_isa(request.param)
    yield request.param
    ck.use_isa(ISAS[0])


@pytest.fixture(
    scope="module",
    params=[(f, b) for f in FAMILIES for b in (4, 8)],
    ids=[f"{f}-{b}bit" for f in FAMILIES for b in (4, 8)],
)
def model(request, isa) -> nn.Module:
    return build(request.param[1], request.param[0])


def run(model, cache, chunks: list[mx.array], steps: int, fused: bool) -> list[mx.array]:
    """Logits at the last position of each prompt chunk, then of `steps` greedy tokens fed
    one at a time."""
    cpu.use_fused(fused)
    try:
        out = []
        for chunk in chunks:
            out.append(model(chunk, cache=cache)[:, -1])
            mx.eval(out[-1])
        for _ in range(steps):
            token = out[-1].argmax(axis=-1)[:, None]
            out.append(model(token, cache=cache)[:, -1])
            mx.eval(out[-1])
        return out
    finally:
        cpu.use_fused(True)


def caches(model, cache_class, *args) -> list:
    return [cache_class(*args) for _ in model.model.layers]


def prompt(batch: int, length: int, seed: int = 0) -> mx.array:
    return mx.random.randint(3, ARGS["vocab_size"], (batch, length), key=mx.random.key(seed))


def assert_identical(ours: list[mx.array], theirs: list[mx.array]) -> None:
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert mx.array_equal(a, b).item(), f"logits {i} differ: {mx.abs(a - b).max().item()}"


@pytest.mark.usefixtures("isa")
@pytest.mark.parametrize("cache_class", [Float16KVCache, KVCache])
def test_one_sequence_matches_the_per_op_path(model, cache_class):
    # 100 tokens (mlx-lm allocates 256 rows), 120 more through the fused layer (a causal
    # mask), then 50 steps: the buffer grows at 256 (mlx-lm's path) and fusing resumes.
    tokens = prompt(1, 220)
    chunks = [tokens[:, :100], tokens[:, 100:]]
    fused = run(model, caches(model, cache_class), chunks, 50, fused=True)
    plain = run(model, caches(model, cache_class), chunks, 50, fused=False)
    assert_identical(fused, plain)


@pytest.mark.usefixtures("isa")
@pytest.mark.parametrize("cache_class", [Float16BatchKVCache, BatchKVCache])
def test_left_padded_batch_matches_the_per_op_path(model, cache_class):
    tokens = prompt(3, 40, seed=1)
    chunks = [tokens[:, :16], tokens[:, 16:]]
    padding = [5, 0, 11]
    fused = run(model, caches(model, cache_class, padding), chunks, 20, fused=True)
    plain = run(model, caches(model, cache_class, padding), chunks, 20, fused=False)
    assert_identical(fused, plain)


def test_caches_sharing_a_buffer_do_not_see_each_others_rows(model):
    """Twins of one prompt's cache (as the prefix cache hands out) decode different tokens,
    interleaved: a buffer held twice is copied before it is written, as MLX's slice update
    copies it. Each must give what a cache of its own gives."""
    fed = {"first": [7, 9, 11], "second": [107, 109, 111]}

    def prefilled() -> list:
        cache = [Float16KVCache() for _ in model.model.layers]
        run(model, cache, [prompt(1, 30, seed=2)], 0, fused=False)
        return cache

    def feed(cache: list, token: int) -> mx.array:
        logits = model(mx.array([[token]]), cache=cache)[:, -1]
        mx.eval(logits)
        return logits

    alone = {}
    cpu.use_fused(False)
    try:
        for name, tokens in fed.items():
            cache = prefilled()
            alone[name] = [feed(cache, token) for token in tokens]
    finally:
        cpu.use_fused(True)
    shared = prefilled()
    twins = {name: [copy.copy(layer) for layer in shared] for name in fed}
    together = {name: [] for name in fed}
    for step in range(3):
        for name, tokens in fed.items():
            together[name].append(feed(twins[name], tokens[step]))
    for name in fed:
        assert_identical(together[name], alone[name])


@pytest.mark.parametrize("family", FAMILIES)
def test_blocks_with_float32_layers_take_mlx_lm_path(family):
    twin = build(4, family)
    cpu.to_float32([twin.model.layers[0]])
    assert all(type(block) is FAMILIES[family][2] for block in twin.model.layers)
    tokens = prompt(1, 12, seed=3)
    fused = run(twin, [Float16KVCache() for _ in twin.model.layers], [tokens], 4, fused=True)
    plain = run(twin, [Float16KVCache() for _ in twin.model.layers], [tokens], 4, fused=False)
    assert_identical(fused, plain)


def test_project_kv_refuses_a_cache_without_room(model):
    attn = model.model.layers[0].self_attn
    x = mx.zeros((1, 2, ARGS["hidden_size"]))
    k = attn.k_proj
    proj = (k["weight"], k["scales"], k["biases"], k.group_size, k.bits)
    cache = mx.zeros((1, 2, 8, 64), dtype=mx.float16)
    offset = mx.array(7, dtype=mx.int32)
    with pytest.raises(ValueError, match="room"):
        ck.project_kv(x, mx.ones((ARGS["hidden_size"],)), 1e-5, proj, cache, 7, offset)


def test_gate_and_up_of_different_groups_match_the_per_op_path():
    """Gate and up share one split (and, on the direct integer path, one rounding of their
    activations, which is per group of the weights): with gate in groups of 32 and up in
    groups of 64 each must still be its own per-op product."""
    model = build(4)
    for block in model.model.layers:
        gate = block["mlp"]["gate_proj"]
        requantized = mx.quantize(gate.dequantized(), 32, 4)
        x8 = layers.x8_weights(gate)  # in the layout the layer had
        arrays = layers.interleaved(*requantized) if x8 else requantized
        gate.weight, gate.scales, gate.biases = arrays
        gate.group_size = 32
    tokens = prompt(1, 30, seed=2)
    fused = run(model, caches(model, Float16KVCache), [tokens], 12, fused=True)
    plain = run(model, caches(model, Float16KVCache), [tokens], 12, fused=False)
    assert_identical(fused, plain)
