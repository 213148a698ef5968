"""What an imported GGUF architecture is: the mlx-lm model it becomes, how llama.cpp's
converter renamed and changed its tensors (so that the import can undo it), and the layer
names most families share. The families, each in a module of its own, are collected by
gguf_registry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from inference.conversion.gguf_file import GGUFFile, TensorInfo, UnsupportedGGUF

_ATTENTION = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
}

_MLP = {"ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}

_QK_NORM = {"attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}

# Mixtures of experts: llama.cpp stacks each layer's experts into one [experts, out, in]
# tensor, the layout of mlx-lm's SwitchGLU; the router is ffn_gate_inp.
_EXPERTS = {
    "ffn_gate_inp": "mlp.gate",
    "ffn_gate_exps": "mlp.switch_mlp.gate_proj",
    "ffn_up_exps": "mlp.switch_mlp.up_proj",
    "ffn_down_exps": "mlp.switch_mlp.down_proj",
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
