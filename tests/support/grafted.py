"""A hybrid model that answers like a real one: the demo model (SmolLM2-135M, a Llama) grafted
into Granite 4's hybrid layout (mlx-lm's granitemoehybrid), for tests and benchmarks that need
real answers from a model with recurrent state (speculation's acceptance on a code edit:
tests/api/test_speculative.py, bench/speculative.py --hybrid).

Its 30 layers are the attention layers, as they are (the GGUF import's traditional RoPE order
undone per head: each head's rows permuted, which leaves every dot product of q and k as it
was); after every `every`-th one a Mamba-2 layer of random weights with its own MLP, whose two
output projections are scaled by `scale`, so that their state is real, costs what a Mamba-2
layer of this width costs, and moves the answers only slightly. Quantized as the demo is
(4-bit in groups of 32, the embedding 8-bit).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten

GROUP, BITS, EMBEDDING_BITS = 32, 4, 8


def _config(llama: dict, every: int) -> dict:
    types: list[str] = []
    for i in range(llama["num_hidden_layers"]):
        types.append("attention")
        if (i + 1) % every == 0:
            types.append("mamba")
    head_dim = llama["hidden_size"] // llama["num_attention_heads"]
    return {
        "model_type": "granitemoehybrid",
        **{k: llama[k] for k in ("vocab_size", "hidden_size", "intermediate_size")},
        **{k: llama[k] for k in ("num_attention_heads", "num_key_value_heads", "rms_norm_eps")},
        **{k: llama[k] for k in ("max_position_embeddings", "rope_theta", "bos_token_id")},
        "eos_token_id": llama["eos_token_id"],
        "num_hidden_layers": len(types),
        "layer_types": types,
        "attention_bias": False,
        "embedding_multiplier": 1.0,
        "attention_multiplier": head_dim**-0.5,
        "logits_scaling": 1.0,
        "residual_multiplier": 1.0,
        "tie_word_embeddings": True,
        "mamba_n_heads": 2 * llama["hidden_size"] // 64,
        "mamba_d_head": 64,
        "mamba_d_state": 64,
        "mamba_d_conv": 4,
        "mamba_n_groups": 1,
        "mamba_conv_bias": True,
        "mamba_proj_bias": False,
    }


def _unpermuted(name: str, value: mx.array, heads: int) -> mx.array:
    """q/k rows from the GGUF's interleaved RoPE pairs back to halves (per head)."""
    if not re.search(r"self_attn\.[qk]_proj\.", name):
        return value
    rows = value.shape[0] // heads
    order = [*range(0, rows, 2), *range(1, rows, 2)]
    index = mx.array([h * rows + r for h in range(heads) for r in order])
    return value[index]


def _demo_weights(source: Path, llama: dict, places: list[int]) -> dict[str, mx.array]:
    """The demo's weights under the hybrid's names (layer i at places[i])."""
    out = {}
    for path in source.glob("*.safetensors"):
        for name, value in mx.load(str(path)).items():
            found = re.search(r"\.layers\.(\d+)\.", name)
            if found is not None:
                name = name.replace(found.group(0), f".layers.{places[int(found.group(1))]}.")
            heads = (
                llama["num_attention_heads"] if ".q_proj." in name else llama["num_key_value_heads"]
            )
            out[name] = _unpermuted(name, value, heads)
    return out


def grafted(source: Path, destination: Path, every: int = 2, scale: float = 0.05) -> Path:
    """The hybrid built from the demo's converted folder `source` into `destination`."""
    from mlx_lm.models import granitemoehybrid
    from mlx_lm.utils import save_config, save_model

    llama = json.loads((source / "config.json").read_text())
    config = _config(llama, every)
    mx.random.seed(0)
    model = granitemoehybrid.Model(granitemoehybrid.ModelArgs.from_dict(config))
    places = [i for i, t in enumerate(config["layer_types"]) if t == "attention"]
    for i, kind in enumerate(config["layer_types"]):
        if kind == "mamba":
            layer = model.model.layers[i]
            layer.mamba.out_proj.weight = layer.mamba.out_proj.weight * scale
            layer.mlp.down_proj.weight = layer.mlp.down_proj.weight * scale
    nn.quantize(model, GROUP, EMBEDDING_BITS, class_predicate=lambda p, m: "embed_tokens" in p)
    nn.quantize(model, GROUP, BITS, class_predicate=lambda p, m: isinstance(m, nn.Linear))
    weights = dict(tree_flatten(model.parameters()))
    for name, value in _demo_weights(source, llama, places).items():
        assert weights[name].shape == value.shape, name
        weights[name] = value
    model.update(tree_unflatten(list(weights.items())))
    destination.mkdir(parents=True, exist_ok=True)
    save_model(destination, model)
    config["quantization"] = {
        "group_size": GROUP,
        "bits": BITS,
        "model.embed_tokens": {"group_size": GROUP, "bits": EMBEDDING_BITS},
    }
    save_config(config, destination / "config.json")
    for tokenizer in source.glob("tokenizer*"):
        shutil.copy(tokenizer, destination / tokenizer.name)
    return destination
