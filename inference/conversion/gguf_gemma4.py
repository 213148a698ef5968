"""Gemma 4 (llama.cpp's gemma4, text only): sliding and global attention layers with their own
head sizes and rope, the last layers reusing earlier layers' keys and values, optional
per-layer token inputs (E2B, E4B), double-wide MLPs on the shared layers, a scalar per
layer and (26B-A4B) experts beside each layer's MLP. mlx-lm's gemma4_text runs it.

llama.cpp's converter keeps Gemma 4's norms as they are (no 1 + w) and encodes the global
layers' proportional rope as a rope_freqs tensor: divisor 1 for the rotated frequencies, 1e30
for the others, over the global head; the import reads it back into rope_parameters.

Gemma 3n (llama.cpp's gemma3n, text only; mlx-lm's gemma3n): AltUp's four streams, Laurel,
per-layer inputs, activation sparsity and shared keys and values, in the sizes llama.cpp fixes
for it (_GEMMA3N_FIXED). The converter stacks AltUp's projections into altup_proj and
altup_unembd_proj, which the import reads slice by slice (Architecture.stacked). One
difference is let through: mlx-lm's sparsity cutoff uses the gate's population standard
deviation, llama.cpp's (as Hugging Face's) the sample one, which at the models' widths (8192,
16384 values) moves the cutoff by under 1e-4 of a deviation.

Registered, with the other families, in gguf_registry.
"""

from __future__ import annotations

import numpy as np

from inference.conversion.gguf_architecture import _QK_NORM, Architecture, Hyper
from inference.conversion.gguf_config import _experts, _head_dim, _per_layer
from inference.conversion.gguf_file import UnsupportedGGUF, read_tensor_f32
from inference.conversion.gguf_gemma import _GEMMA_LAYER

_GEMMA4_LAYER = {
    **_GEMMA_LAYER,
    **_QK_NORM,
    # the per-layer token input's gate, projection and norm (E2B, E4B)
    "inp_gate": "per_layer_input_gate",
    "proj": "per_layer_projection",
    "post_norm": "post_per_layer_input_norm",
    # 26B-A4B's experts beside the MLP, each branch under norms of its own. The converter
    # fuses each layer's expert gate and up projections into ffn_gate_up_exps (each expert's
    # gate rows, then its up rows, as llama.cpp splits them): read as its two parts
    # (Architecture.fused_rows); llama.cpp also loads them apart, as these names.
    "ffn_gate_inp": "router.proj",
    "ffn_gate_exps": "experts.switch_glu.gate_proj",
    "ffn_up_exps": "experts.switch_glu.up_proj",
    "ffn_down_exps": "experts.switch_glu.down_proj",
    "pre_ffw_norm_2": "pre_feedforward_layernorm_2",
    "post_ffw_norm_1": "post_feedforward_layernorm_1",
    "post_ffw_norm_2": "post_feedforward_layernorm_2",
}
_GEMMA4_TOP = {
    "per_layer_token_embd": "model.embed_tokens_per_layer",
    "per_layer_model_proj": "model.per_layer_model_projection",
    "per_layer_proj_norm": "model.per_layer_projection_norm",
}
_GEMMA4_PARAMS = {
    "layer_output_scale.weight": "layer_scalar",
    "ffn_gate_inp.scale": "router.scale",
    "ffn_down_exps.scale": "router.per_expert_scale",
}
# llama.cpp's divisor for a frequency it leaves unrotated; anything this large is one.
_UNROTATED = 1e29


def _gemma4(hyper: Hyper) -> dict:
    if hyper.get("rope.scaling.type") not in (None, "none"):
        raise UnsupportedGGUF("gemma4 with rope scaling is not supported")
    layers = int(hyper("block_count"))
    sliding = _sliding_layers(hyper, layers)
    types = ["sliding_attention" if s else "full_attention" for s in sliding]
    shared = _shared_layers(hyper)
    _check_kv_sharing(types, shared)
    softcap = float(hyper.get("final_logit_softcapping", 30.0))  # llama.cpp's default
    per_layer = int(hyper("embedding_length_per_layer_input"))
    return (
        _feed_forward(hyper, layers, shared)
        | _moe(hyper, layers)
        | _attention(hyper, sliding)
        | {
            "layer_types": types,
            "num_kv_shared_layers": shared,
            "sliding_window": int(hyper("attention.sliding_window")),
            "rope_parameters": _rope(hyper),
            "final_logit_softcapping": softcap or None,
            "hidden_size_per_layer_input": per_layer,
            "vocab_size_per_layer_input": _per_layer_vocab(hyper, per_layer),
        }
    )


def _shared_layers(hyper: Hyper) -> int:
    """How many of the last layers reuse earlier layers' keys and values."""
    return int(hyper.get("attention.shared_kv_layers", 0) or 0)


def _sliding_layers(hyper: Hyper, layers: int) -> list[bool]:
    """Each layer's kind, which llama.cpp reads from this list only (true: sliding)."""
    pattern = hyper("attention.sliding_window_pattern")
    if not isinstance(pattern, list) or len(pattern) < layers:
        raise UnsupportedGGUF(f"{hyper.arch} without a sliding window flag for every layer")
    return [bool(s) for s in pattern[:layers]]


def _moe(hyper: Hyper, layers: int) -> dict:
    """Experts (26B-A4B): llama.cpp gives a layer experts where it has a router, mlx-lm every
    layer or none. Both route alike: the router's input is the layer's residual under an RMS
    norm without weight, times router.scale / sqrt(hidden); the top-k of its logits, their
    softmax (llama.cpp: softmax over all, renormalized over the top-k), times each chosen
    expert's per_expert_scale (llama.cpp: ffn_down_exps.scale on that expert's output).
    llama.cpp fixes this routing for gemma4 whatever the file's gating keys say."""
    routed = [hyper.file.tensor(f"blk.{i}.ffn_gate_inp.weight") is not None for i in range(layers)]
    if not any(routed):
        return {}
    if not all(routed):
        raise UnsupportedGGUF("gemma4 with experts on some layers only is not supported")
    experts = _experts(hyper)  # refuses per-layer expert sizes
    return {
        "enable_moe_block": True,
        "num_experts": experts["num_experts"],
        "top_k_experts": experts["num_experts_per_tok"],
        "moe_intermediate_size": experts["moe_intermediate_size"],
    }


def _check_kv_sharing(types: list[str], shared: int, arch: str = "gemma4") -> None:
    """llama.cpp's shared layers reuse layer n-2's keys and values when sliding and n-1's when
    global (n the first shared layer); mlx-lm's, the last earlier layer of their own kind."""
    first = len(types) - shared
    if not shared:
        return
    if first < 2:
        raise UnsupportedGGUF(f"{arch} with fewer than two layers of its own keys is not supported")
    for kind, source in (("sliding_attention", first - 2), ("full_attention", first - 1)):
        if kind not in types[first:]:
            continue
        own = [i for i in range(first) if types[i] == kind]
        if not own or own[-1] != source:
            raise UnsupportedGGUF(
                f"{arch} whose shared layers would reuse another layer's keys in mlx-lm "
                f"(llama.cpp: layer {source} for {kind})"
            )


def _feed_forward(hyper: Hyper, layers: int, shared: int) -> dict:
    """One size, or the double-wide MLP: twice it on the shared layers, as mlx-lm has it."""
    sizes = _per_layer(hyper, "feed_forward_length")[:layers]
    size = sizes[0]
    if all(s == size for s in sizes):
        return {"intermediate_size": size, "use_double_wide_mlp": False}
    first = layers - shared
    if shared and sizes == [size if i < first else 2 * size for i in range(layers)]:
        return {"intermediate_size": size, "use_double_wide_mlp": True}
    raise UnsupportedGGUF("gemma4 feed-forward sizes other than double-wide shared layers")


def _attention(hyper: Hyper, sliding: list[bool]) -> dict:
    """Head sizes (key_length is the global layers', key_length_swa the sliding ones'), and
    key/value heads: one count for both kinds, or the global layers' own where they use keys
    as values."""
    full, swa = _head_dim(hyper), int(hyper("attention.key_length_swa"))
    if (
        int(hyper("attention.value_length", full)) != full
        or int(hyper("attention.value_length_swa", swa)) != swa
    ):
        raise UnsupportedGGUF("gemma4 with value heads unlike its key heads is not supported")
    if isinstance(hyper("attention.head_count"), list):
        raise UnsupportedGGUF("gemma4 with per-layer head counts is not supported")
    counts = _per_layer(hyper, "attention.head_count_kv")[: len(sliding)]
    pairs = list(zip(counts, sliding, strict=True))
    by_kind = {kind: {c for c, s in pairs if s == kind} for kind in (True, False)}
    if any(len(c) > 1 for c in by_kind.values()):
        raise UnsupportedGGUF("gemma4 with per-layer key/value head counts is not supported")
    swa_heads = next(iter(by_kind[True] or by_kind[False]))
    full_heads = next(iter(by_kind[False] or by_kind[True]))
    k_eq_v = _keys_as_values(hyper, sliding)
    if full_heads != swa_heads and not k_eq_v:
        raise UnsupportedGGUF("gemma4 with other key/value heads on its global layers is only "
                              "supported where those use keys as values")  # fmt: skip
    return {
        "head_dim": swa,
        "global_head_dim": full,
        "num_key_value_heads": swa_heads,
        "num_global_key_value_heads": full_heads,
        "attention_k_eq_v": k_eq_v,
    }


def _keys_as_values(hyper: Hyper, sliding: list[bool]) -> bool:
    """Whether the global layers have no value projection (31B): llama.cpp then uses the keys
    as values, as mlx-lm's attention_k_eq_v does, but only for every global layer."""
    shared = _shared_layers(hyper)
    own = range(len(sliding) - shared)
    no_v = {i for i in own if hyper.file.tensor(f"blk.{i}.attn_v.weight") is None}
    if not no_v:
        return False
    if no_v != {i for i in own if not sliding[i]}:
        raise UnsupportedGGUF("gemma4 using keys as values on other layers than the global ones")
    return True


def _rope(hyper: Hyper) -> dict:
    """Sliding layers: plain rope over the whole head. Global layers: the rotated part of
    rope_freqs (proportional rope, its frequencies over the whole global head)."""
    full, swa = _head_dim(hyper), int(hyper("attention.key_length_swa"))
    if int(hyper("rope.dimension_count", full)) != full:
        raise UnsupportedGGUF("gemma4 whose global layers rotate part of the head by count")
    if int(hyper("rope.dimension_count_swa", full)) != swa:
        raise UnsupportedGGUF("gemma4 whose sliding layers rotate part of the head")
    sliding = {"rope_type": "default", "rope_theta": float(hyper.get("rope.freq_base_swa", 1e4))}
    rotated = _rotated_dims(hyper, full)
    factor = rotated / full
    if int(full * factor) != rotated:
        raise UnsupportedGGUF(f"gemma4 rotating {rotated} of {full} dimensions")
    return {
        "sliding_attention": sliding,
        "full_attention": {
            "rope_type": "proportional",
            "rope_theta": float(hyper("rope.freq_base", 10000.0)),
            "partial_rotary_factor": factor,
        },
    }


def _rotated_dims(hyper: Hyper, head_dim: int) -> int:
    """2 x the frequencies rope_freqs leaves rotated: divisors of 1 then of 1e30 only."""
    tensor = hyper.file.tensor("rope_freqs.weight")
    if tensor is None:
        return head_dim
    divisors = read_tensor_f32(hyper.file.path, tensor)
    rotated = int(np.sum(divisors < _UNROTATED))
    if len(divisors) != head_dim // 2 or not (
        np.all(divisors[:rotated] == 1.0) and np.all(divisors[rotated:] >= _UNROTATED)
    ):
        raise UnsupportedGGUF("gemma4's rope_freqs is not a proportional rope's")
    return 2 * rotated


def _per_layer_vocab(hyper: Hyper, per_layer: int) -> int:
    if not per_layer:
        return 0
    table = hyper.file.tensor("per_layer_token_embd.weight")
    if table is None:
        raise UnsupportedGGUF(f"{hyper.arch} with per-layer inputs but no per_layer_token_embd")
    return int(table.shape[0])


# Gemma 3n: llama.cpp hard-codes what the E2B and E4B models have, and the import refuses files
# that say otherwise: 20 layers with keys of their own, activation sparsity (the 0.95 quantile
# of a Gaussian fitted to the gate's values) on the first 10 layers, 4 AltUp streams (the
# first active), Laurel's rank 64, per-layer inputs of 256; the corrected AltUp prediction
# always scaled, the AltUp coefficients never clipped.
_GEMMA3N_FIXED = {
    "altup_num_inputs": 4,
    "altup_active_idx": 0,
    "laurel_rank": 64,
    "hidden_size_per_layer_input": 256,
}
_GEMMA3N_KV_LAYERS = 20
_GEMMA3N_SPARSE_LAYERS = 10
_GEMMA3N_SPARSITY = 0.95
_GEMMA3N_STD_MULTIPLIER = 1.6448533535003662  # the standard normal's 0.95 quantile
_GEMMA3N_LAYER = {
    **_GEMMA_LAYER,
    **_QK_NORM,
    "inp_gate": "per_layer_input_gate",
    "proj": "per_layer_projection",
    "post_norm": "post_per_layer_input_norm",
    "altup_correct_coef": "altup.correction_coefs",
    "altup_predict_coef": "altup.prediction_coefs",
    "altup_router": "altup.modality_router",
    "altup_router_norm": "altup.router_norm",
    "laurel_l": "laurel.linear_left",
    "laurel_r": "laurel.linear_right",
    "laurel_post_norm": "laurel.post_laurel_norm",
}
_TEXT = "model.language_model"  # where mlx-lm's gemma3n keeps the text model
_GEMMA3N_TOP = {
    "token_embd": f"{_TEXT}.embed_tokens",
    "output_norm": f"{_TEXT}.norm",
    "per_layer_token_embd": f"{_TEXT}.embed_tokens_per_layer",
    "per_layer_model_proj": f"{_TEXT}.per_layer_model_projection",
    "per_layer_proj_norm": f"{_TEXT}.per_layer_projection_norm",
    # the slices of the stacked altup_proj and altup_unembd_proj (Architecture.stacked)
    **{f"altup_proj_{i}": f"{_TEXT}.altup_projections.{i}" for i in range(16)},
    **{f"altup_unembd_proj_{i}": f"{_TEXT}.altup_unembed_projections.{i}" for i in range(16)},
}


_NO_CLIP = 3.4028234663852886e38  # float32's largest


def _gemma3n(hyper: Hyper) -> dict:
    """mlx-lm's gemma3n reads its whole text model from text_config."""
    if hyper.get("rope.scaling.type") not in (None, "none"):
        raise UnsupportedGGUF("gemma3n with rope scaling is not supported")
    layers = int(hyper("block_count"))
    types = ["sliding_attention" if s else "full_attention" for s in _sliding_layers(hyper, layers)]
    shared = _shared_layers(hyper)
    if layers - shared != _GEMMA3N_KV_LAYERS or len(set(types[:_GEMMA3N_KV_LAYERS])) != 2:
        raise UnsupportedGGUF(
            f"gemma3n with other than {_GEMMA3N_KV_LAYERS} layers of their own keys, "
            "sliding and global (llama.cpp's fixed number)"
        )
    _check_kv_sharing(types, shared, "gemma3n")
    text = _gemma3n_sizes(hyper, layers) | {
        "model_type": "gemma3n_text",
        "num_hidden_layers": layers,
        "layer_types": types,
        "num_kv_shared_layers": shared,
        "sliding_window": int(hyper("attention.sliding_window")),
        "rope_theta": float(hyper("rope.freq_base", 10000.0)),
        "rope_local_base_freq": float(hyper.get("rope.freq_base_swa", 10000.0)),
        "rms_norm_eps": float(hyper("attention.layer_norm_rms_epsilon")),
        "max_position_embeddings": int(hyper("context_length")),
        "final_logit_softcapping": float(hyper.get("final_logit_softcapping", 30.0)),
        "activation_sparsity_pattern": _sparsity(hyper, layers),
        "altup_num_inputs": int(hyper("altup.num_inputs")),
        "altup_active_idx": int(hyper("altup.active_idx")),
        # llama.cpp does not clip; transformers' config (which AutoTokenizer reads) wants a
        # number: one no float32 coefficient passes
        "altup_coef_clip": _NO_CLIP,
        "altup_correct_scale": True,
    }
    for key, value in _GEMMA3N_FIXED.items():
        if text[key] != value:
            raise UnsupportedGGUF(f"gemma3n with {key} {text[key]} (llama.cpp's is fixed: {value})")
    return {"text_config": text}


def _gemma3n_sizes(hyper: Hyper, layers: int) -> dict:
    head_dim = _head_dim(hyper)
    if int(hyper("rope.dimension_count", head_dim)) != head_dim:
        raise UnsupportedGGUF("gemma3n rotating part of the head is not supported")
    kv_heads = hyper("attention.head_count_kv")
    if isinstance(kv_heads, list) or isinstance(hyper("attention.head_count"), list):
        raise UnsupportedGGUF("gemma3n with per-layer head counts is not supported")
    sizes = _per_layer(hyper, "feed_forward_length")[:layers]
    per_layer = int(hyper("embedding_length_per_layer_input"))
    return {
        "hidden_size": int(hyper("embedding_length")),
        "intermediate_size": sizes[0] if len(set(sizes)) == 1 else sizes,
        "num_attention_heads": int(hyper("attention.head_count")),
        "num_key_value_heads": int(kv_heads),
        "head_dim": head_dim,
        "vocab_size": _rows(hyper, "token_embd.weight"),
        "hidden_size_per_layer_input": per_layer,
        "vocab_size_per_layer_input": _per_layer_vocab(hyper, per_layer),
        "laurel_rank": _rows(hyper, "blk.0.laurel_l.weight"),
    }


def _rows(hyper: Hyper, name: str) -> int:
    tensor = hyper.file.tensor(name)
    if tensor is None:
        raise UnsupportedGGUF(f"{hyper.arch} without {name}")
    return int(tensor.shape[0])


def _sparsity(hyper: Hyper, layers: int) -> list[float]:
    """llama.cpp's fixed activation sparsity, which the file's scales (if any) must state."""
    sparse = min(layers, _GEMMA3N_SPARSE_LAYERS)
    scales = hyper.get("activation_sparsity_scale")
    expected = [_GEMMA3N_STD_MULTIPLIER] * sparse + [0.0] * (layers - sparse)
    if scales is not None and not np.allclose(scales[:layers], expected, atol=1e-4):
        raise UnsupportedGGUF(
            f"gemma3n whose activation sparsity is not llama.cpp's (the first {sparse} layers "
            f"at {_GEMMA3N_SPARSITY})"
        )
    return [_GEMMA3N_SPARSITY] * sparse + [0.0] * (layers - sparse)


GEMMA4_ARCHITECTURES = {
    "gemma4": Architecture(
        "gemma4",
        "gemma4_text",
        "Gemma4ForCausalLM",
        _GEMMA4_LAYER,
        _gemma4,
        config_tensors=("rope_freqs.weight",),
        top_names=_GEMMA4_TOP,
        layer_params=_GEMMA4_PARAMS,
        per_layer_sizes=True,
        fused_rows={"ffn_gate_up_exps.weight": ("ffn_gate_exps.weight", "ffn_up_exps.weight")},
    ),
    "gemma3n": Architecture(
        "gemma3n",
        "gemma3n",
        "Gemma3nForConditionalGeneration",
        _GEMMA3N_LAYER,
        _gemma3n,
        tied_only=True,
        layer_prefix=f"{_TEXT}.layers",
        top_names=_GEMMA3N_TOP,
        layer_params={"altup_correct_scale.weight": "altup.correct_output_scale"},
        # mlx-lm casts these to float32 before it uses them, which a quantized layer forbids
        float_only=("altup_correct_coef", "altup_predict_coef"),
        per_layer_sizes=True,
        stacked=("altup_proj.weight", "altup_unembd_proj.weight"),
    ),
}
