"""Each GGUF architecture we import: the mlx-lm model it becomes, its config.json, and how
llama.cpp's converter renamed and changed its tensors (so we can undo it)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from inference.conversion.gguf_file import (
    GGUFFile,
    TensorInfo,
    UnsupportedGGUF,
    read_tensor_f32,
)

_ATTENTION = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
}
_MLP = {"ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
_QK_NORM = {"attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
_LLAMA_LAYER = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    **_ATTENTION,
    **_MLP,
}
_GEMMA_LAYER = {
    "attn_norm": "input_layernorm",
    # llama.cpp's name for the norm after attention (ffn_norm is the one before the MLP)
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
    **_ATTENTION,
    **_MLP,
}
_PHI3_LAYER = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_qkv": "self_attn.qkv_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_up": "mlp.gate_up_proj",  # gate and up fused, gate first, as Phi-3 itself has them
    "ffn_down": "mlp.down_proj",
}
# Mixtures of experts: llama.cpp stacks each layer's experts into one [experts, out, in]
# tensor, the layout of mlx-lm's SwitchGLU; the router is ffn_gate_inp.
_EXPERTS = {
    "ffn_gate_inp": "mlp.gate",
    "ffn_gate_exps": "mlp.switch_mlp.gate_proj",
    "ffn_up_exps": "mlp.switch_mlp.up_proj",
    "ffn_down_exps": "mlp.switch_mlp.down_proj",
}
_QWEN3_MOE_LAYER = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    **_ATTENTION,
    **_QK_NORM,
    **_EXPERTS,
}
_SHARED_EXPERTS = {
    "ffn_gate_shexp": "mlp.shared_experts.gate_proj",
    "ffn_up_shexp": "mlp.shared_experts.up_proj",
    "ffn_down_shexp": "mlp.shared_experts.down_proj",
}
# GLM-4.5: leading dense layers, then experts with a shared one; sigmoid routing whose choice
# adds a per-expert bias (exp_probs_b), as DeepSeek-V3's.
_GLM4_MOE_LAYER = {
    "attn_norm": "input_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    **_ATTENTION,
    **_QK_NORM,
    **_MLP,
    **_EXPERTS,
    **_SHARED_EXPERTS,
}
# DeepSeek-V3's multi-head latent attention. llama.cpp's converter splits kv_b_proj into
# attn_k_b (per head, transposed) and attn_v_b: exactly mlx-lm's embed_q and unembed_out.
_DEEPSEEK2_LAYER = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",  # the Lite models: no query compression
    "attn_q_a": "self_attn.q_a_proj",
    "attn_q_a_norm": "self_attn.q_a_layernorm",
    "attn_q_b": "self_attn.q_b_proj",
    "attn_kv_a_mqa": "self_attn.kv_a_proj_with_mqa",
    "attn_kv_a_norm": "self_attn.kv_a_layernorm",
    "attn_k_b": "self_attn.embed_q",
    "attn_v_b": "self_attn.unembed_out",
    "attn_output": "self_attn.o_proj",
    **_MLP,
    **_EXPERTS,
    **_SHARED_EXPERTS,
}
_ROUTER_BIAS = {"exp_probs_b.bias": "mlp.gate.e_score_correction_bias"}
_LFM2_LAYER = {
    "attn_norm": "operator_norm",
    "ffn_norm": "ffn_norm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.out_proj",
    "attn_q_norm": "self_attn.q_layernorm",
    "attn_k_norm": "self_attn.k_layernorm",
    "shortconv.conv": "conv.conv",
    "shortconv.in_proj": "conv.in_proj",
    "shortconv.out_proj": "conv.out_proj",
    "ffn_gate": "feed_forward.w1",
    "ffn_down": "feed_forward.w2",
    "ffn_up": "feed_forward.w3",
}
# Granite 4.0-H: Mamba-2 layers and attention layers, each followed by the feed-forward.
_GRANITE_HYBRID_LAYER = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    **_ATTENTION,
    **_MLP,
    "ssm_in": "mamba.in_proj",
    "ssm_conv1d": "mamba.conv1d",
    "ssm_norm": "mamba.norm",
    "ssm_out": "mamba.out_proj",
    "ffn_gate_inp": "block_sparse_moe.router.layer",
    "ffn_gate_exps": "block_sparse_moe.switch_mlp.gate_proj",
    "ffn_up_exps": "block_sparse_moe.switch_mlp.up_proj",
    "ffn_down_exps": "block_sparse_moe.switch_mlp.down_proj",
    # mlx-lm's shared expert has gate and up in one projection, gate first
    "ffn_gate_shexp": "shared_mlp.input_linear",
    "ffn_up_shexp": "shared_mlp.input_linear",
    "ffn_down_shexp": "shared_mlp.output_linear",
}
_MAMBA2_PARAMS = {"ssm_a": "mamba.A_log", "ssm_d": "mamba.D", "ssm_dt.bias": "mamba.dt_bias"}
# Nemotron-H: each layer one of a Mamba-2 mixer, attention (no rope) or a squared-ReLU MLP,
# each under one norm; mlx-lm names the model "backbone" and every layer's module "mixer".
_NEMOTRON_H_LAYER = {
    "attn_norm": "norm",
    "attn_q": "mixer.q_proj",
    "attn_k": "mixer.k_proj",
    "attn_v": "mixer.v_proj",
    "attn_output": "mixer.o_proj",
    "ffn_up": "mixer.up_proj",
    "ffn_down": "mixer.down_proj",
    "ssm_in": "mixer.in_proj",
    "ssm_conv1d": "mixer.conv1d",
    "ssm_norm": "mixer.norm",
    "ssm_out": "mixer.out_proj",
}
# Nemotron 3 Nano: Mamba-2 and attention layers, and mixtures of squared-ReLU experts (up and
# down only) with a shared expert, sigmoid routing with a bias on the choice.
_NEMOTRON_H_MOE_LAYER = _NEMOTRON_H_LAYER | {
    "ffn_gate_inp": "mixer.gate",
    "ffn_up_exps": "mixer.switch_mlp.fc1",
    "ffn_down_exps": "mixer.switch_mlp.fc2",
    "ffn_up_shexp": "mixer.shared_experts.up_proj",
    "ffn_down_shexp": "mixer.shared_experts.down_proj",
    "ffn_latent_down": "mixer.fc1_latent_proj",  # Nemotron 3 Super's latent experts
    "ffn_latent_up": "mixer.fc2_latent_proj",
}
_NEMOTRON_H_PARAMS = {"ssm_a": "mixer.A_log", "ssm_d": "mixer.D", "ssm_dt.bias": "mixer.dt_bias"}

# Qwen3-Next: gated delta-net layers, then every n-th a gated attention layer (its q_proj
# holds the gate too); experts with a gated shared expert.
_QWEN3_NEXT_LAYER = {
    "attn_norm": "input_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    **_ATTENTION,
    **_QK_NORM,
    # mlx-lm's in_proj_qkvz interleaves q, k, v, z by key head; llama.cpp's converter
    # regrouped them as attn_qkv and attn_gate (z)
    "attn_qkv": "linear_attn.in_proj_qkvz",
    "attn_gate": "linear_attn.in_proj_qkvz",
    "ssm_ba": "linear_attn.in_proj_ba",
    "ssm_conv1d": "linear_attn.conv1d",
    "ssm_norm": "linear_attn.norm",
    "ssm_out": "linear_attn.out_proj",
    **_EXPERTS,
    "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
    "ffn_up_shexp": "mlp.shared_expert.up_proj",
    "ffn_down_shexp": "mlp.shared_expert.down_proj",
    "ffn_gate_inp_shexp": "mlp.shared_expert_gate",
}
_GPT_OSS_LAYER = {
    "attn_norm": "input_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    **_ATTENTION,
    "ffn_gate_inp": "mlp.router",
    "ffn_gate_exps": "mlp.experts.gate_proj",
    "ffn_up_exps": "mlp.experts.up_proj",
    "ffn_down_exps": "mlp.experts.down_proj",
}
TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


class Hyper:
    """The architecture's hyperparameters: `hyper("block_count")` reads `<arch>.block_count`."""

    def __init__(self, file: GGUFFile, arch: str) -> None:
        self.file, self.arch, self.metadata = file, arch, file.metadata

    def __call__(self, key: str, default=None):
        value = self.metadata.get(f"{self.arch}.{key}", default)
        if value is None:
            raise UnsupportedGGUF(f"the file has no {self.arch}.{key}")
        return value

    def get(self, key: str, default=None):
        return self.metadata.get(f"{self.arch}.{key}", default)


@dataclass(frozen=True)
class Architecture:
    gguf_name: str
    model_type: str
    hf_class: str
    layer_names: dict[str, str]
    extra_config: Callable[[Hyper], dict]
    # Gemma's RMSNorm multiplies by (1 + w); llama.cpp's converter stores 1 + w.
    norm_offset: float = 0.0
    # llama.cpp's converter permutes Llama's Q/K rows for interleaved (GPT-J style) rotary
    # embeddings: mlx-lm's `traditional` rope is that same layout, so no weights are touched.
    rope_traditional: bool = False
    # Tensors that fold into config.json rather than weights.
    config_tensors: tuple[str, ...] = field(default=())
    tied_only: bool = False  # the mlx-lm model has no separate output projection
    layer_prefix: str = "model.layers"  # where mlx-lm keeps its layers ("backbone.layers")
    # Layer tensors that are an mlx-lm parameter of their own rather than a module's weight or
    # bias: GGUF "name.suffix" -> parameter (gpt-oss's attn_sinks.weight: self_attn.sinks).
    layer_params: dict[str, str] = field(default_factory=dict)
    # Layer tensors kept in float whatever the file holds: mlx-lm reads them as plain arrays
    # (GLM's and DeepSeek's router weight), which it cannot quantize.
    float_only: tuple[str, ...] = field(default=())
    top_names: dict[str, str] = field(default_factory=dict)  # besides TOP_NAMES
    # Layer tensors whose shape the converter changed, by "name.suffix": the same bytes in the
    # checkpoint's shape (LFM2's conv weights, squeezed from [hidden, 1, kernel], which
    # mlx-lm's sanitize expects).
    shapes: dict[str, Callable[[tuple[int, ...]], tuple[int, ...]]] = field(default_factory=dict)
    # Layer tensors whose values the converter changed, by "name.suffix": the inverse, for
    # float tensors (Mamba's A = -exp(A_log)).
    transforms: dict[str, Callable[[np.ndarray], np.ndarray]] = field(default_factory=dict)
    # Layers without attention say so with a key/value head count of 0 (LFM2's convolutions).
    hybrid: bool = False
    # extra_config gives the key/value head counts and feed-forward size, which differ by
    # layer in ways the generic reading refuses (Gemma 4's global layers, double-wide MLPs;
    # Gemma 3n's, in its text_config)
    per_layer_sizes: bool = False
    # Tensors the converter stacked from several of the checkpoint's, by GGUF name: each slice
    # of the first axis is read as a tensor of its own, "name_<i>.weight" (Gemma 3n's
    # altup_proj, three projections in one).
    stacked: tuple[str, ...] = field(default=())
    # Layer tensors that fill one MLX tensor (their layer_names agree), by the order of their
    # rows there: {"ffn_gate_shexp": 0, "ffn_up_shexp": 1} for Granite's fused shared expert.
    parts: dict[str, int] = field(default_factory=dict)
    # Where runs of a layer tensor's rows go in the MLX tensor, when not all together:
    # (hyperparameters, "name.suffix") -> ((first source row, first output row, count), ...)
    # or None (Qwen3-Next's in_proj_qkvz, interleaved by key head, from llama.cpp's
    # attn_qkv and attn_gate).
    row_segments: Callable[[Hyper, str], tuple | None] | None = None
    # Runs of equal width of a layer tensor's columns that the converter reordered: (hyper,
    # "name.suffix") -> the source run of each output run, or None (Qwen3.5's value heads).
    column_order: Callable[[Hyper, str], tuple[int, ...] | None] | None = None
    # Layer tensors the converter fused from several of the checkpoint's, by "name.suffix":
    # the "name.suffix" of each part, in order, each an equal run of rows of every slice of
    # the first axis (Gemma 4's ffn_gate_up_exps: each expert's gate rows, then its up rows).
    # Each part is a tensor of its own whose rows are runs of the fused one's (segments): the
    # fused tensor is read once per part. Quantized blocks run along the columns, so the
    # split is exact whatever the file's type.
    fused_rows: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def tensors(self, file: GGUFFile) -> list[TensorInfo]:
        """The file's tensors, stacked ones as their slices, fused ones as their parts (each
        named as its part and shaped, for reading, as the whole)."""
        return [
            part
            for tensor in file.tensors
            for sliced in self._slices(tensor)
            for part in self._fused_parts(file, sliced)
        ]

    def _fused_parts(self, file: GGUFFile, tensor: TensorInfo) -> list[TensorInfo]:
        key = _layer_key(tensor.name)
        if key not in self.fused_rows:
            return [tensor]
        parts = self.fused_rows[key]
        if len(tensor.shape) < 2 or tensor.shape[-2] % len(parts):
            raise UnsupportedGGUF(f"{tensor.name}'s rows do not split into {len(parts)} parts")
        layer = tensor.name.split(".")[1]
        names = [f"blk.{layer}.{part}" for part in parts]
        if any(file.tensor(name) is not None for name in names):
            raise UnsupportedGGUF(f"{tensor.name} beside its parts in the same file")
        return [replace(tensor, name=name) for name in names]

    def _fused_part(self, file: GGUFFile, gguf_name: str) -> tuple[TensorInfo, int, int] | None:
        """(the fused tensor, this part's index, the number of parts), for a part read from
        a fused tensor (not one the file has apart)."""
        key = _layer_key(gguf_name)
        for fused, parts in self.fused_rows.items():
            if key not in parts:
                continue
            source = file.tensor(f"blk.{gguf_name.split('.')[1]}.{fused}")
            return None if source is None else (source, parts.index(key), len(parts))
        return None

    def part_shape(self, file: GGUFFile, tensor: TensorInfo) -> TensorInfo:
        """A fused tensor's part as the MLX tensor it fills: its share of each slice's rows."""
        part = self._fused_part(file, tensor.name)
        if part is None:
            return tensor
        *leading, rows, columns = tensor.shape
        return replace(tensor, shape=(*leading, rows // part[2], columns))

    def _fused_segments(self, tensor: TensorInfo, index: int, count: int) -> tuple:
        """Each slice's run of this part's rows, from the fused tensor's flat rows."""
        rows = tensor.shape[-2]
        share = rows // count
        return tuple((s * rows + index * share, s * share, share)
                     for s in range(tensor.rows // rows))  # fmt: skip

    def _slices(self, tensor: TensorInfo) -> list[TensorInfo]:
        if tensor.name not in self.stacked:
            return [tensor]
        count, stem = tensor.shape[0], tensor.name.removesuffix(".weight")
        size = tensor.n_bytes // count  # the first axis is the outermost: slices are contiguous
        return [
            replace(tensor, name=f"{stem}_{i}.weight", shape=tensor.shape[1:],
                    offset=tensor.offset + i * size, n_bytes=size)
            for i in range(count)
        ]  # fmt: skip

    def segments(self, hyper: Hyper, gguf_name: str) -> tuple | None:
        key, part = _layer_key(gguf_name), self._fused_part(hyper.file, gguf_name)
        if part is not None:
            return self._fused_segments(*part)
        if self.row_segments is None or key is None:
            return None
        return self.row_segments(hyper, key)

    def columns(self, hyper: Hyper, gguf_name: str) -> tuple[int, ...] | None:
        key = _layer_key(gguf_name)
        if self.column_order is None or key is None:
            return None
        return self.column_order(hyper, key)

    def part_of(self, gguf_name: str) -> int:
        return self.parts.get((_layer_key(gguf_name) or "").rpartition(".")[0], 0)

    def restore_shape(self, tensor: TensorInfo) -> TensorInfo:
        shape = self.shapes.get(_layer_key(tensor.name) or "")
        return tensor if shape is None else replace(tensor, shape=shape(tensor.shape))

    def transform(self, gguf_name: str) -> Callable[[np.ndarray], np.ndarray] | None:
        return self.transforms.get(_layer_key(gguf_name) or "")

    def keeps_float(self, gguf_name: str) -> bool:
        return (_layer_key(gguf_name) or "").rpartition(".")[0] in self.float_only

    def mlx_name(self, gguf_name: str, layers: int | None = None) -> str | None:
        """None for a tensor folded into the config, or of a layer at or past `layers` (the
        multi-token prediction layers llama.cpp appends, which mlx-lm does not run)."""
        if gguf_name in self.config_tensors:
            return None
        parts, key = gguf_name.split("."), _layer_key(gguf_name)
        if key is not None and layers is not None and int(parts[1]) >= layers:
            return None
        if key in self.layer_params:
            return f"{self.layer_prefix}.{parts[1]}.{self.layer_params[key]}"
        # a layer tensor's name may have dots of its own (LFM2's shortconv.conv)
        module, _, suffix = (key or "").rpartition(".")
        if module in self.layer_names:
            return f"{self.layer_prefix}.{parts[1]}.{self.layer_names[module]}.{suffix}"
        top_names = TOP_NAMES | self.top_names
        if len(parts) == 2 and parts[0] in top_names:
            return f"{top_names[parts[0]]}.{parts[1]}"
        raise UnsupportedGGUF(f"unexpected tensor {gguf_name!r} for architecture {self.gguf_name}")


def _layer_key(gguf_name: str) -> str | None:
    """A layer tensor's name within its layer: "blk.3.attn_q.weight" -> "attn_q.weight"
    (Mamba's "blk.3.ssm_a" has no suffix); None for the others."""
    parts = gguf_name.split(".")
    if len(parts) >= 3 and parts[0] == "blk" and parts[1].isdigit():
        return ".".join(parts[2:])
    return None


def _flat(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (math.prod(shape),)


def _unsqueeze_1(shape: tuple[int, ...]) -> tuple[int, ...]:
    """[rows, kernel] back to the checkpoint's convolution weight [rows, 1, kernel]."""
    return (shape[0], 1, *shape[1:])


def _llama(hyper: Hyper) -> dict:
    config: dict = {}
    if hyper.file.tensor("blk.0.attn_q.bias") is not None:
        config["attention_bias"] = True
    rope_freqs = hyper.file.tensor("rope_freqs.weight")
    if rope_freqs is not None:
        factors = read_tensor_f32(hyper.file.path, rope_freqs)
        config["rope_scaling"] = llama3_rope_scaling(
            factors, float(hyper("rope.freq_base", 10000.0)), _head_dim(hyper)
        )
    return config


def _gemma_scale(hyper: Hyper, big_layers: int) -> int | float:
    # llama.cpp scales queries by 1/sqrt(hidden / heads) for the 27B models, by
    # 1/sqrt(head_dim) for the others; mlx-lm's query_pre_attn_scalar is that number, an
    # integer in transformers' config (which AutoTokenizer reads, and refuses a float in).
    if int(hyper("block_count")) == big_layers:
        scale = int(hyper("embedding_length")) / int(hyper("attention.head_count"))
        return int(scale) if scale.is_integer() else scale
    return _head_dim(hyper)


def _gemma2(hyper: Hyper) -> dict:
    return {
        "attn_logit_softcapping": float(hyper.get("attn_logit_softcapping", 50.0)),
        "final_logit_softcapping": float(hyper.get("final_logit_softcapping", 30.0)),
        "query_pre_attn_scalar": _gemma_scale(hyper, 46),
    }


def _gemma3(hyper: Hyper) -> dict:
    window = int(hyper.get("attention.sliding_window", 0) or 0)
    pattern = hyper.get("attention.sliding_window_pattern", 6)
    if isinstance(pattern, list):
        pattern = _every_nth_global(pattern, int(hyper("block_count")))
    config = {
        "query_pre_attn_scalar": _gemma_scale(hyper, 62),
        "rope_local_base_freq": float(hyper.get("rope.freq_base_swa", 10000.0)),
        "sliding_window": window or int(hyper("context_length")),
        "sliding_window_pattern": int(pattern) if window else 1,
    }
    if hyper.get("final_logit_softcapping"):
        config["final_logit_softcapping"] = float(hyper("final_logit_softcapping"))
    return config


def _mistral3(hyper: Hyper) -> dict:
    """Ministral 3 (mlx-lm's ministral3): Llama's layers, YaRN and Llama 4's attention
    temperature, both in rope_parameters."""
    if hyper.file.tensor("blk.0.attn_q.bias") is not None:
        raise UnsupportedGGUF("mistral3 with attention biases is not supported")
    if hyper.get("attention.sliding_window"):
        raise UnsupportedGGUF("mistral3 with a sliding window is not supported")
    context = int(hyper("context_length"))
    scaling = _rope_scaling(hyper) or {"type": "default"}
    if scaling["type"] not in ("default", "yarn"):
        raise UnsupportedGGUF(f"mistral3 with {scaling['type']} rope scaling is not supported")
    rope_type = scaling.pop("type")
    return {
        "rope_parameters": scaling
        | {
            "rope_type": rope_type,
            "rope_theta": float(hyper("rope.freq_base", 10000.0)),
            # llama.cpp's temperature counts in original contexts (of YaRN's, which it needs)
            "llama_4_scaling_beta": float(hyper.get("attention.temperature_scale", 0.0) or 0.0),
            "original_max_position_embeddings": int(
                hyper.get("rope.scaling.original_context_length", context)
            ),
        },
    }


def _mistral3_rows(hyper: Hyper, key: str) -> tuple | None:
    """The converter interleaved each head's two halves of Q's and K's rows (Llama's
    permutation); mlx-lm's ministral3 rotates halves, so each row goes back."""
    if key not in ("attn_q.weight", "attn_k.weight"):
        return None
    heads = int(hyper("attention.head_count"))
    if key == "attn_k.weight":
        heads = int(hyper("attention.head_count_kv", heads))
    half = _head_dim(hyper) // 2
    return tuple(
        (h * 2 * half + 2 * i + j, h * 2 * half + j * half + i, 1)
        for h in range(heads)
        for i in range(half)
        for j in range(2)
    )


def _every_nth_global(sliding: list, layers: int) -> int:
    """A per-layer pattern (true: sliding) as mlx-lm's one count: every n-th layer global,
    the others sliding, which is all mlx-lm's gemma3_text can compute."""
    sliding = [bool(s) for s in sliding[:layers]]
    if not any(sliding):
        return 1
    if all(sliding) or len(sliding) != layers:
        raise UnsupportedGGUF("a sliding window pattern without a global layer is not supported")
    n = sliding.index(False) + 1
    if sliding != [(i + 1) % n != 0 for i in range(layers)]:
        raise UnsupportedGGUF(
            "a sliding window pattern other than every n-th layer global is not supported"
        )
    return n


def _phi3(hyper: Hyper) -> dict:
    head_dim = _head_dim(hyper)
    config: dict = {
        "partial_rotary_factor": int(hyper.get("rope.dimension_count", head_dim)) / head_dim,
        "original_max_position_embeddings": int(
            hyper.get("rope.scaling.original_context_length", hyper("context_length"))
        ),
    }
    long, short = (hyper.file.tensor(f"rope_factors_{k}.weight") for k in ("long", "short"))
    if long is not None and short is not None:
        config["rope_scaling"] = {
            "type": "longrope",
            "long_factor": read_tensor_f32(hyper.file.path, long).tolist(),
            "short_factor": read_tensor_f32(hyper.file.path, short).tolist(),
        }
    return config


_SOFTMAX, _SIGMOID = 1, 2  # gguf's ExpertGatingFuncType


def _experts(hyper: Hyper) -> dict:
    """The expert counts every mixture-of-experts GGUF has."""
    length = hyper("expert_feed_forward_length")
    if isinstance(length, list):
        raise UnsupportedGGUF("per-layer expert sizes are not supported yet")
    return {
        "num_experts": int(hyper("expert_count")),
        "num_experts_per_tok": int(hyper("expert_used_count")),
        "moe_intermediate_size": int(length),
    }


def _qwen3_moe(hyper: Hyper) -> dict:
    # llama.cpp's qwen3moe makes every layer a mixture and always renormalizes the chosen
    # experts' weights (Qwen3-30B-A3B's norm_topk_prob); mlx-lm reads both from the config.
    return _experts(hyper) | {
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
    }


def _gpt_oss(hyper: Hyper) -> dict:
    # llama.cpp alternates a sliding layer and a global one, sliding first (its SWA pattern
    # of 2), which is also mlx-lm's default for gpt-oss; it is written out so that a file
    # with another count of layers cannot silently shift it.
    layers = int(hyper("block_count"))
    if hyper.get("attention.sliding_window_pattern") is not None:
        raise UnsupportedGGUF("gpt-oss with its own sliding window pattern is not supported")
    if float(hyper.get("rope.freq_base_swa", hyper("rope.freq_base", 10000.0))) != float(
        hyper("rope.freq_base", 10000.0)
    ):
        raise UnsupportedGGUF("gpt-oss with a rope base of its own for sliding layers")
    return {
        "num_local_experts": int(hyper("expert_count")),
        "num_experts_per_tok": int(hyper("expert_used_count")),
        "intermediate_size": int(hyper("expert_feed_forward_length")),
        "sliding_window": int(hyper("attention.sliding_window")),
        "layer_types": [
            "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)
        ],
    }


def _sigmoid_experts(hyper: Hyper, gating: int = _SIGMOID) -> dict:
    """DeepSeek-V3-style routing as mlx-lm's glm4_moe and deepseek_v3 read it. gating: what
    llama.cpp assumes of a file that does not say."""
    if int(hyper.get("expert_gating_func", gating)) != _SIGMOID:
        raise UnsupportedGGUF("only sigmoid expert routing is supported for this architecture")
    experts = _experts(hyper)
    shared = int(hyper.get("expert_shared_count", 0) or 0)
    first_moe = int(hyper.get("leading_dense_block_count", 0) or 0)
    if hyper.file.tensor(f"blk.{first_moe}.exp_probs_b.bias") is None:
        raise UnsupportedGGUF("sigmoid routing without its expert bias is not supported")
    return {
        "n_routed_experts": experts["num_experts"],
        "num_experts_per_tok": experts["num_experts_per_tok"],
        "moe_intermediate_size": experts["moe_intermediate_size"],
        "n_shared_experts": shared or None,
        "first_k_dense_replace": first_moe,
        # llama.cpp scales only by a factor it was given (0: none)
        "routed_scaling_factor": float(hyper.get("expert_weights_scale", 0.0) or 1.0),
        "norm_topk_prob": bool(hyper.get("expert_weights_norm", False)),
        # llama.cpp first keeps the best expert groups when the file has groups
        "n_group": int(hyper.get("expert_group_count", 1) or 1),
        "topk_group": int(hyper.get("expert_group_used_count", 1) or 1),
    }


def _glm4_moe(hyper: Hyper) -> dict:
    if any(hyper.get("rope.dimension_sections") or []):
        raise UnsupportedGGUF("GLM-4.5 with multimodal rope sections is not supported")
    file = hyper.file
    return _sigmoid_experts(hyper) | {
        "partial_rotary_factor": int(hyper("rope.dimension_count")) / _head_dim(hyper),
        "use_qk_norm": file.tensor("blk.0.attn_q_norm.weight") is not None,
        "attention_bias": file.tensor("blk.0.attn_q.bias") is not None,
        "rope_scaling": _rope_scaling(hyper),  # mlx-lm requires the key
    }


def _deepseek2(hyper: Hyper) -> dict:
    file = hyper.file
    if file.tensor("output.weight") is None:
        raise UnsupportedGGUF("deepseek2 with tied embeddings is not supported")
    if hyper.get("attention.temperature_scale"):
        raise UnsupportedGGUF("deepseek2 with attention temperature tuning is not supported")
    key_length = int(hyper("attention.key_length_mla"))
    rope = int(hyper("rope.dimension_count"))
    has_q_lora = file.tensor("blk.0.attn_q_a.weight") is not None
    # DeepSeek-V2's files may not say: llama.cpp takes them for softmax routing
    return _sigmoid_experts(hyper, gating=_SOFTMAX) | {
        # the file says one key/value head: the latent attention as llama.cpp computes it
        "num_key_value_heads": int(hyper("attention.head_count")),
        "head_dim": key_length,
        "kv_lora_rank": int(hyper("attention.kv_lora_rank")),
        "q_lora_rank": int(hyper("attention.q_lora_rank")) if has_q_lora else None,
        "qk_rope_head_dim": rope,
        "qk_nope_head_dim": key_length - rope,
        "v_head_dim": int(hyper("attention.value_length_mla")),
        "moe_layer_freq": 1,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
    }


def _lfm2(hyper: Hyper) -> dict:
    if int(hyper.get("attention.sliding_window", 0) or 0):
        raise UnsupportedGGUF("LFM2 with a sliding window is not supported")
    hidden, heads = int(hyper("embedding_length")), int(hyper("attention.head_count"))
    if _head_dim(hyper) != hidden // heads:
        raise UnsupportedGGUF("LFM2 with a head size other than hidden / heads")
    ff = int(hyper("feed_forward_length"))
    return {
        "layer_types": [
            "full_attention" if attends else "conv" for attends in attention_layers(hyper)
        ],
        "norm_eps": float(hyper("attention.layer_norm_rms_epsilon")),
        "conv_L_cache": int(hyper("shortconv.l_cache")),
        "conv_bias": hyper.file.tensor("blk.0.shortconv.in_proj.bias") is not None,
        # the converter stored the size after LFM2's own adjustment: none to do again
        "block_dim": hidden,
        "block_ff_dim": ff,
        "block_auto_adjust_ff_dim": False,
        "block_multiple_of": 1,
        # unused without the adjustment; transformers' config (AutoTokenizer reads it) wants
        # a number, not None
        "block_ffn_dim_multiplier": 1.0,
    }


def _granite_hybrid(hyper: Hyper) -> dict:
    file = hyper.file
    if hyper.get("rope.scaling.finetuned", True):
        # llama.cpp's switch for rope: Bamba's, whose Q/K rows the converter permuted
        raise UnsupportedGGUF("granitehybrid with rope (Bamba) is not supported")
    groups, inner = int(hyper("ssm.group_count")), int(hyper("ssm.inner_size"))
    if groups != 1:
        # llama.cpp normalizes the gated output per group, mlx-lm over all of it
        raise UnsupportedGGUF("granitehybrid with more than one Mamba group is not supported")
    heads = int(hyper("ssm.time_step_rank"))
    hidden, attention_heads = int(hyper("embedding_length")), int(hyper("attention.head_count"))
    if _head_dim(hyper) != hidden // attention_heads:
        raise UnsupportedGGUF("granitehybrid with a head size other than hidden / heads")
    return {
        "layer_types": ["attention" if attends else "mamba" for attends in attention_layers(hyper)],
        "position_embedding_type": "nope",
        "embedding_multiplier": float(hyper.get("embedding_scale", 0.0) or 1.0),
        "residual_multiplier": float(hyper.get("residual_scale", 0.0) or 1.0),
        "logits_scaling": float(hyper.get("logit_scale", 0.0) or 1.0),
        "attention_multiplier": float(
            hyper.get("attention.scale", 0.0) or _head_dim(hyper) ** -0.5
        ),
        "attention_bias": _any_layer_has(file, "attn_q.bias"),
        "mamba_n_heads": heads,
        "mamba_d_head": inner // heads,
        "mamba_d_state": int(hyper("ssm.state_size")),
        "mamba_d_conv": int(hyper("ssm.conv_kernel")),
        "mamba_n_groups": groups,
        "mamba_conv_bias": _any_layer_has(file, "ssm_conv1d.bias"),
        "mamba_proj_bias": _any_layer_has(file, "ssm_in.bias"),
        # llama.cpp puts no bounds on the time step
        "time_step_limit": [0.0, 1e30],
    } | _granite_experts(hyper)


def _granite_experts(hyper: Hyper) -> dict:
    if not int(hyper.get("expert_count", 0) or 0):
        return {}
    shared = int(hyper.get("expert_shared_feed_forward_length", 0) or 0)
    if not shared:
        raise UnsupportedGGUF("granitehybrid with experts but no shared expert")
    return {
        "num_local_experts": int(hyper("expert_count")),
        "num_experts_per_tok": int(hyper("expert_used_count")),
        "shared_intermediate_size": shared,
    }


def _nemotron_h(hyper: Hyper) -> dict:
    file = hyper.file
    if file.tensor("output.weight") is None:
        raise UnsupportedGGUF(f"{hyper.arch} with tied embeddings is not supported")
    scale = float(hyper.get("attention.scale", 0.0) or 0.0)
    if scale and not math.isclose(scale, _head_dim(hyper) ** -0.5, rel_tol=1e-6):
        raise UnsupportedGGUF(f"{hyper.arch} with an attention scale of its own is not supported")
    moe = hyper.arch == "nemotron_h_moe"
    if not moe and hyper.get("expert_count"):
        raise UnsupportedGGUF("nemotron_h with experts is not supported (nemotron_h_moe is)")
    heads, inner = int(hyper("ssm.time_step_rank")), int(hyper("ssm.inner_size"))
    layers = main_layers(file, ARCHITECTURES[hyper.arch])  # not the multi-token prediction's
    kinds = zip(attention_layers(hyper), _per_layer(hyper, "feed_forward_length"), strict=True)
    config = {
        # a layer with key/value heads attends, one with a feed-forward size is an MLP (or a
        # mixture), the others are Mamba-2: llama.cpp's rule
        "hybrid_override_pattern": [
            "*" if attends else ("E" if moe else "-") if ff else "M" for attends, ff in kinds
        ][:layers],
        "layer_norm_epsilon": float(
            hyper.get("attention.layer_norm_rms_epsilon") or hyper("attention.layer_norm_epsilon")
        ),
        "attention_bias": _any_layer_has(file, "attn_q.bias"),
        "mlp_bias": _any_layer_has(file, "ffn_up.bias"),
        "mamba_num_heads": heads,
        "mamba_head_dim": inner // heads,
        "mamba_proj_bias": _any_layer_has(file, "ssm_in.bias"),
        "use_bias": _any_layer_has(file, "ssm_in.bias"),
        "use_conv_bias": _any_layer_has(file, "ssm_conv1d.bias"),
        "ssm_state_size": int(hyper("ssm.state_size")),
        "conv_kernel": int(hyper("ssm.conv_kernel")),
        # llama.cpp and mlx-lm both normalize the gated output per group
        "n_groups": int(hyper("ssm.group_count")),
    }
    return config | (_nemotron_h_experts(hyper) if moe else {})


def _nemotron_h_experts(hyper: Hyper) -> dict:
    """llama.cpp routes Nemotron's experts by sigmoid, choosing with the bias (exp_probs_b),
    renormalizing if told and scaling by a factor it was given, as mlx-lm's MoEGate."""
    experts = _experts(hyper)  # refuses per-layer sizes (the Puzzle models)
    if isinstance(hyper("expert_used_count"), list):
        raise UnsupportedGGUF("per-layer expert counts are not supported yet")
    if not int(hyper.get("expert_shared_count", 0) or 0):
        raise UnsupportedGGUF("nemotron_h_moe without a shared expert is not supported")
    groups = int(hyper.get("expert_group_count", 1) or 1)
    return {
        "n_routed_experts": experts["num_experts"],
        "num_experts_per_tok": experts["num_experts_per_tok"],
        "moe_intermediate_size": experts["moe_intermediate_size"],
        "moe_shared_expert_intermediate_size": int(hyper("expert_shared_feed_forward_length")),
        "n_shared_experts": int(hyper("expert_shared_count")),
        "norm_topk_prob": bool(hyper.get("expert_weights_norm", False)),
        "routed_scaling_factor": float(hyper.get("expert_weights_scale", 0.0) or 1.0),
        "n_group": groups,
        "topk_group": int(hyper.get("expert_group_used_count", groups) or groups),
        "moe_latent_size": int(hyper("moe_latent_size")) if hyper.get("moe_latent_size") else None,
    }


def _per_layer(hyper: Hyper, key: str) -> list[int]:
    value = hyper(key)
    if isinstance(value, list):
        return [int(v) for v in value]
    return [int(value)] * int(hyper("block_count"))


def _feed_forward(hyper: Hyper) -> int:
    """One feed-forward size; a hybrid's list has 0 for layers without one."""
    sizes = {size for size in _per_layer(hyper, "feed_forward_length") if size}
    if len(sizes) > 1:
        raise UnsupportedGGUF("per-layer feed-forward sizes are not supported yet")
    return sizes.pop() if sizes else 0


def delta_net(hyper: Hyper, arch: Architecture) -> dict:
    """A gated delta-net hybrid's layer pattern and delta-net sizes (Qwen3-Next, Qwen3.5), as
    mlx-lm reads them: an attention layer every full_attention_interval-th, refused otherwise."""
    interval = int(hyper.get("full_attention_interval", 4) or 4)
    layers = main_layers(hyper.file, arch)
    recurrent = hyper.get("attention.recurrent_layers")
    expected = [(i + 1) % interval != 0 for i in range(layers)]
    if recurrent is not None and [bool(r) for r in recurrent[:layers]] != expected:
        raise UnsupportedGGUF(f"{hyper.arch} whose attention layers are not every n-th")
    value_heads = int(hyper("ssm.time_step_rank"))
    return {
        "full_attention_interval": interval,
        "linear_num_value_heads": value_heads,
        "linear_num_key_heads": int(hyper("ssm.group_count")),
        "linear_key_head_dim": int(hyper("ssm.state_size")),
        "linear_value_head_dim": int(hyper("ssm.inner_size")) // value_heads,
        "linear_conv_kernel_dim": int(hyper("ssm.conv_kernel")),
    }


def _qwen3_next(hyper: Hyper) -> dict:
    shared = int(hyper.get("expert_shared_feed_forward_length", 0) or 0)
    if not shared:
        raise UnsupportedGGUF("Qwen3-Next without a shared expert is not supported")
    return (
        _experts(hyper)
        | delta_net(hyper, ARCHITECTURES["qwen3next"])
        | {
            "partial_rotary_factor": int(hyper("rope.dimension_count")) / _head_dim(hyper),
            "shared_expert_intermediate_size": shared,
            # llama.cpp makes every layer a mixture and renormalizes the chosen experts' weights
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "norm_topk_prob": True,
        }
    )


def _qwen3_next_rows(hyper: Hyper, key: str) -> tuple | None:
    """Where attn_qkv's and attn_gate's rows go in in_proj_qkvz: per key head, its q, k,
    then its value heads' v and z."""
    if key not in ("attn_qkv.weight", "attn_gate.weight"):
        return None
    key_heads, key_dim = int(hyper("ssm.group_count")), int(hyper("ssm.state_size"))
    per_head = int(hyper("ssm.inner_size")) // key_heads  # v (or z) rows per key head
    block = 2 * key_dim + 2 * per_head
    if key == "attn_gate.weight":
        return tuple((h * per_head, h * block + 2 * key_dim + per_head, per_head)
                     for h in range(key_heads))  # fmt: skip
    return tuple(
        segment
        for h in range(key_heads)
        for segment in (
            (h * key_dim, h * block, key_dim),
            ((key_heads + h) * key_dim, h * block + key_dim, key_dim),
            (2 * key_heads * key_dim + h * per_head, h * block + 2 * key_dim, per_head),
        )
    )


def _row(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape if len(shape) == 2 else (1, shape[-1])


def _unsqueeze_last(shape: tuple[int, ...]) -> tuple[int, ...]:
    """[channels, kernel] as mlx-lm's convolution weight [channels, kernel, 1]: mlx-lm's
    qwen3_next moves the axis only for checkpoints with unstacked experts."""
    return (*shape, 1)


def _any_layer_has(file: GGUFFile, key: str) -> bool:
    return any(_layer_key(tensor.name) == key for tensor in file.tensors)


# Mamba2Model's changes (Granite's, Nemotron's): A and D unsqueezed to [heads, 1], A stored
# as -exp(A_log), the gated norm's weight split by group and the convolution's squeezed. The
# converter also permuted Q's and K's rows for a rope these models' attention does not have,
# which leaves their products unchanged.
_MAMBA2_SHAPES = {
    "ssm_a": _flat,
    "ssm_d": _flat,
    "ssm_norm.weight": _flat,
    "ssm_conv1d.weight": _unsqueeze_1,
}
_MAMBA2_TRANSFORMS = {"ssm_a": lambda a: np.log(-a)}
_NEMOTRON_H_TOP = {"token_embd": "backbone.embeddings", "output_norm": "backbone.norm_f"}


ARCHITECTURES = {
    arch.gguf_name: arch
    for arch in (
        Architecture(
            "llama",
            "llama",
            "LlamaForCausalLM",
            _LLAMA_LAYER,
            _llama,
            rope_traditional=True,
            config_tensors=("rope_freqs.weight",),
        ),
        Architecture(
            "mistral3",
            "ministral3",
            "Ministral3ForCausalLM",
            _LLAMA_LAYER,
            _mistral3,
            row_segments=_mistral3_rows,
        ),
        Architecture("qwen2", "qwen2", "Qwen2ForCausalLM", _LLAMA_LAYER, lambda h: {}),
        Architecture("qwen3", "qwen3", "Qwen3ForCausalLM", _LLAMA_LAYER | _QK_NORM, lambda h: {}),
        Architecture("qwen3moe", "qwen3_moe", "Qwen3MoeForCausalLM", _QWEN3_MOE_LAYER, _qwen3_moe),
        Architecture(
            "gpt-oss",
            "gpt_oss",
            "GptOssForCausalLM",
            _GPT_OSS_LAYER,
            _gpt_oss,
            layer_params={"attn_sinks.weight": "self_attn.sinks"},
        ),
        Architecture(
            "glm4moe",
            "glm4_moe",
            "Glm4MoeForCausalLM",
            _GLM4_MOE_LAYER,
            _glm4_moe,
            layer_params=_ROUTER_BIAS,
            float_only=("ffn_gate_inp",),
        ),
        Architecture(
            "deepseek2",
            "deepseek_v3",
            "DeepseekV3ForCausalLM",
            _DEEPSEEK2_LAYER,
            _deepseek2,
            layer_params=_ROUTER_BIAS,
            float_only=("ffn_gate_inp",),
        ),
        Architecture(
            "lfm2",
            "lfm2",
            "Lfm2ForCausalLM",
            _LFM2_LAYER,
            _lfm2,
            tied_only=True,
            # LFM2's final norm, which llama.cpp names after the embeddings
            top_names={"token_embd_norm": "model.embedding_norm"},
            shapes={"shortconv.conv.weight": _unsqueeze_1},
            hybrid=True,
        ),
        Architecture(
            "granitehybrid",
            "granitemoehybrid",
            "GraniteMoeHybridForCausalLM",
            _GRANITE_HYBRID_LAYER,
            _granite_hybrid,
            layer_params=_MAMBA2_PARAMS,
            shapes=_MAMBA2_SHAPES,
            transforms=_MAMBA2_TRANSFORMS,
            hybrid=True,
            parts={"ffn_gate_shexp": 0, "ffn_up_shexp": 1},
        ),
        Architecture(
            "qwen3next",
            "qwen3_next",
            "Qwen3NextForCausalLM",
            _QWEN3_NEXT_LAYER,
            _qwen3_next,
            layer_params={"ssm_a": "linear_attn.A_log", "ssm_dt.bias": "linear_attn.dt_bias"},
            # The converter stored A = -exp(A_log) and squeezed the convolution's weight;
            # it added 1 to the norms, as mlx-lm does when it reads a checkpoint
            shapes={"ssm_conv1d.weight": _unsqueeze_last, "ffn_gate_inp_shexp.weight": _row},
            transforms={"ssm_a": lambda a: np.log(-a)},
            row_segments=_qwen3_next_rows,
        ),
        Architecture(
            "nemotron_h",
            "nemotron_h",
            "NemotronHForCausalLM",
            _NEMOTRON_H_LAYER,
            _nemotron_h,
            layer_prefix="backbone.layers",
            top_names=_NEMOTRON_H_TOP,
            layer_params=_NEMOTRON_H_PARAMS,
            shapes=_MAMBA2_SHAPES,
            transforms=_MAMBA2_TRANSFORMS,
            hybrid=True,
        ),
        Architecture(
            "nemotron_h_moe",
            "nemotron_h",
            "NemotronHForCausalLM",
            _NEMOTRON_H_MOE_LAYER,
            _nemotron_h,
            layer_prefix="backbone.layers",
            top_names=_NEMOTRON_H_TOP,
            layer_params=_NEMOTRON_H_PARAMS
            | {"exp_probs_b.bias": "mixer.gate.e_score_correction_bias"},
            float_only=("ffn_gate_inp",),
            shapes=_MAMBA2_SHAPES,
            transforms=_MAMBA2_TRANSFORMS,
            hybrid=True,
        ),
        Architecture(
            "gemma2", "gemma2", "Gemma2ForCausalLM", _GEMMA_LAYER, _gemma2, 1.0, tied_only=True
        ),
        Architecture(
            "gemma3",
            "gemma3_text",
            "Gemma3ForCausalLM",
            _GEMMA_LAYER | _QK_NORM,
            _gemma3,
            1.0,
        ),
        Architecture(
            "phi3",
            "phi3",
            "Phi3ForCausalLM",
            _PHI3_LAYER,
            _phi3,
            config_tensors=("rope_factors_long.weight", "rope_factors_short.weight"),
        ),
    )
}


def main_layers(file: GGUFFile, arch: Architecture) -> int:
    """The layers mlx-lm runs: llama.cpp's block count includes the multi-token prediction
    layers (GLM-4.5's nextn) appended after them."""
    hyper = Hyper(file, arch.gguf_name)
    return int(hyper("block_count")) - int(hyper.get("nextn_predict_layers", 0) or 0)


def _kv_heads(hyper: Hyper, arch: Architecture, heads: int) -> int:
    """One count for every attention layer; a hybrid's list has 0 for its other layers."""
    kv_heads = hyper("attention.head_count_kv", heads)
    if not isinstance(kv_heads, list):
        return int(kv_heads)
    counts = {int(count) for count in kv_heads if count or not arch.hybrid}
    if len(counts) != 1:
        raise UnsupportedGGUF("per-layer key/value head counts are not supported yet")
    return counts.pop()


def attention_layers(hyper: Hyper) -> list[bool]:
    kv_heads = hyper("attention.head_count_kv")
    if not isinstance(kv_heads, list):
        return [True] * int(hyper("block_count"))
    return [bool(count) for count in kv_heads]


def _head_dim(hyper: Hyper) -> int:
    default = int(hyper("embedding_length")) // int(hyper("attention.head_count"))
    return int(hyper.get("attention.key_length", default))


def model_config(file: GGUFFile, arch: Architecture, vocab_size: int) -> dict:
    hyper = Hyper(file, arch.gguf_name)
    heads = int(hyper("attention.head_count"))
    kv_heads = None if arch.per_layer_sizes else _kv_heads(hyper, arch, heads)
    config = {
        "architectures": [arch.hf_class],
        "model_type": arch.model_type,
        "hidden_size": int(hyper("embedding_length")),
        "num_hidden_layers": main_layers(file, arch),
        "intermediate_size": None if arch.per_layer_sizes else _feed_forward(hyper),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": _head_dim(hyper),
        "rms_norm_eps": float(hyper("attention.layer_norm_rms_epsilon", 1e-5)),
        "vocab_size": vocab_size,
        "max_position_embeddings": int(hyper("context_length", 4096)),
        "rope_theta": float(hyper("rope.freq_base", 10000.0)),
        "rope_traditional": arch.rope_traditional,
        "tie_word_embeddings": file.tensor("output.weight") is None,
        "bos_token_id": file.metadata.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": file.metadata.get("tokenizer.ggml.eos_token_id"),
    }
    if arch.tied_only and not config["tie_word_embeddings"]:
        raise UnsupportedGGUF(f"{arch.gguf_name} with a separate output.weight is not supported")
    scaling = _rope_scaling(hyper)
    if scaling:
        config["rope_scaling"] = scaling
    config.update(arch.extra_config(hyper))
    return config


def _rope_scaling(hyper: Hyper) -> dict | None:
    kind = hyper.get("rope.scaling.type")
    if kind in (None, "none"):
        return None
    factor = float(hyper("rope.scaling.factor"))
    if kind == "linear":
        return {"type": "linear", "factor": factor}
    if kind == "yarn":
        return _yarn(hyper, factor)
    raise UnsupportedGGUF(f"rope scaling {kind!r} is not supported (supported: linear, yarn)")


def _yarn(hyper: Hyper, factor: float) -> dict:
    """mlx-lm's YarnRoPE: llama.cpp's YaRN but for its extrapolation mix, which a converter
    may set. llama.cpp ignores the file's yarn_attn_factor (it derives the scale from the
    factor, as YarnRoPE does) and multiplies in rope.scaling.attn_factor."""
    if float(hyper.get("rope.scaling.yarn_ext_factor", 1.0)) != 1.0:
        raise UnsupportedGGUF("YaRN with an extrapolation factor other than 1 is not supported")
    if float(hyper.get("rope.scaling.attn_factor", 1.0)) != 1.0:
        raise UnsupportedGGUF("YaRN with a rope attention factor is not supported")
    scaling = {
        "type": "yarn",
        "factor": factor,
        "original_max_position_embeddings": int(hyper("rope.scaling.original_context_length")),
    }
    log_multiplier = float(hyper.get("rope.scaling.yarn_log_multiplier", 0.0) or 0.0)
    if log_multiplier and hyper.arch == "deepseek2":
        # The converter stored 0.1 * mscale_all_dim, and llama.cpp takes mscale to be the same
        # (DeepSeek's configs have them equal): no rotary scale, the attention's scale squared.
        mscale = float(np.float32(log_multiplier) / np.float32(0.1))  # as llama.cpp divides
        scaling |= {"mscale": mscale, "mscale_all_dim": mscale}
    elif log_multiplier:
        scaling |= {"mscale": 1.0, "mscale_all_dim": log_multiplier}
    for key in ("beta_fast", "beta_slow"):
        if hyper.get(f"rope.scaling.yarn_{key}") is not None:
            scaling[key] = float(hyper(f"rope.scaling.yarn_{key}"))
    return scaling


def _llama3_factors(params: dict, base: float, dims: int) -> np.ndarray:
    """Llama 3's rotary frequency divisors from its rope_scaling parameters."""
    old, low, high = params["original_max_position_embeddings"], 1.0, params["high_freq_factor"]
    factor = params["factor"]
    wavelen = 2 * math.pi * base ** (np.arange(0, dims, 2, dtype=np.float64) / dims)
    smooth = (old / wavelen - low) / (high - low)
    middle = 1 / ((1 - smooth) / factor + smooth)
    return np.where(wavelen < old / high, 1.0, np.where(wavelen > old / low, factor, middle))


def llama3_rope_scaling(factors: np.ndarray, base: float, dims: int) -> dict:
    """Recovers Llama 3's rope_scaling from the divisors llama.cpp's converter stored in
    rope_freqs. The divisors depend on (original context, low, high) only through
    old/low and old/high, so low is fixed at 1 and the other two are fitted."""
    factors = np.asarray(factors, dtype=np.float64)
    factor = float(factors.max())
    wavelen = 2 * math.pi * base ** (np.arange(0, dims, 2, dtype=np.float64) / dims)
    middle = (factors > 1 + 1e-6) & (factors < factor - 1e-6)
    if middle.sum() >= 2:
        # 1/r = (1 - s)/factor + s, and s = (old/wavelen - 1)/(high - 1): linear in 1/wavelen.
        smooth = (1 / factors[middle] - 1 / factor) / (1 - 1 / factor)
        slope, intercept = np.polyfit(1 / wavelen[middle], smooth, 1)
        high = 1 - 1 / intercept
        old = -slope / intercept
    else:  # no transition band: place both edges between the last 1 and the first `factor`
        ones, scaled = wavelen[factors <= 1 + 1e-6], wavelen[factors >= factor - 1e-6]
        if len(ones) == 0 or len(scaled) == 0 or ones.max() >= scaled.min():
            raise UnsupportedGGUF("rope_freqs does not follow Llama 3's rope scaling")
        old = float(scaled.min()) * 0.999
        high = old / (float(ones.max()) * 1.001)
    params = {
        "rope_type": "llama3",
        "factor": factor,
        "low_freq_factor": 1.0,
        "high_freq_factor": float(high),
        "original_max_position_embeddings": float(old),
    }
    if not np.allclose(_llama3_factors(params, base, dims), factors, rtol=1e-4, atol=1e-5):
        raise UnsupportedGGUF("rope_freqs does not follow Llama 3's rope scaling")
    return params
