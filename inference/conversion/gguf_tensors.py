"""One GGUF tensor into MLX arrays, a block of rows at a time.

GGUF types whose blocks are MLX's affine format in disguise (32 weights, w = scale * q + bias:
Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, and Q4_K/Q5_K whose 256-weight super-blocks hold eight such
groups) are repacked exactly, and so is MXFP4 (gpt-oss's experts), into MLX's own mxfp4 mode:
the same 4-bit E2M1 codes and E8M0 scale per 32 weights. Q6_K matrices are kept bit for bit in
the CPU kernels' layout for them (mode "q6_k", kernels/src/k6.h; the engine turns them into
MLX's 8-bit where the kernels do not compute them: engine/q6k.py). Every other type the `gguf`
package can dequantize is dequantized and re-quantized to MLX affine of at least its bits, and
the error that adds is measured.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf import quants as gguf_quants

from inference.conversion.gguf_file import TensorInfo, UnsupportedGGUF, read_rows

GROUP = 32  # MLX group size of every quantized tensor we write
FLOAT_TYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}
# Types MLX holds exactly, with their bits.
EXACT_BITS = {"Q4_0": 4, "Q4_1": 4, "Q5_0": 5, "Q5_1": 5, "Q8_0": 8, "Q4_K": 4, "Q5_K": 5}
SCALES_DTYPE = "float16"  # as mlx-lm's own quantized models
# Types MLX holds exactly in a mode other than affine: type -> (mode, bits).
EXACT_MODES = {"MXFP4": ("mxfp4", 4)}
# GGUF's Q6_K matrices as the CPU kernels read them: 6-bit codes, an int8 scale per 16 and a
# float16 one per 256 (kernels/src/k6.h); stacked experts stay MLX's 8-bit.
Q6K_MODE, Q6K_GROUP, Q6K_SUPER = "q6_k", 16, 256


def _dequantizable() -> set[str]:
    """The quantized types the gguf package implements dequantization for."""
    names = set()
    for qtype in GGMLQuantizationType:
        block, size = GGML_QUANT_SIZES[qtype]
        if qtype.name in FLOAT_TYPES or block == 1:
            continue  # floats are handled apart; integer tensors are not weights
        try:
            gguf_quants.dequantize(np.zeros((1, size * (256 // block or 1)), np.uint8), qtype)
        except NotImplementedError:
            continue
        names.add(qtype.name)
    return names


QUANTIZED_TYPES = _dequantizable()
SUPPORTED_TYPES = set(FLOAT_TYPES) | QUANTIZED_TYPES


def bits_per_weight(type_name: str) -> float:
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[type_name]]
    return size * 8 / block


@dataclass(frozen=True)
class Plan:
    """What a tensor becomes: MLX affine of `bits` (exactly or re-quantized) or a float dtype."""

    source: str
    bits: int | None = None
    exact: bool = False
    dtype: str = "float32"
    mode: str = "affine"  # MLX's quantization mode

    @property
    def quantized(self) -> bool:
        return self.bits is not None


def plan_for(tensor: TensorInfo, weights: str, quantizable: bool) -> Plan:
    """weights: "quantized" (keep quantized types quantized), "float16" or "float32"."""
    source = tensor.type_name
    if source not in SUPPORTED_TYPES:
        raise UnsupportedGGUF(
            f"tensor type {source} ({tensor.name}) is not supported "
            f"(supported: {', '.join(sorted(SUPPORTED_TYPES))})"
        )
    if source in FLOAT_TYPES:
        keep = FLOAT_TYPES[source] if weights == "quantized" or not quantizable else weights
        return Plan(source, dtype=keep)
    if weights != "quantized" or not quantizable or tensor.columns % GROUP:
        return Plan(source, dtype="float32" if weights == "quantized" else weights)
    if source in EXACT_BITS:
        return Plan(source, bits=EXACT_BITS[source], exact=True)
    if source in EXACT_MODES:
        mode, bits = EXACT_MODES[source]
        return Plan(source, bits=bits, exact=True, mode=mode)
    if source == "Q6_K" and len(tensor.shape) == 2:
        return Plan(source, bits=6, exact=True, mode=Q6K_MODE)
    # At least the source's bits, among the widths the CPU kernels run fast (4 and 8).
    return Plan(source, bits=4 if bits_per_weight(source) < 5 else 8)


def common_plan(plans: list[Plan]) -> Plan:
    """One plan for tensors that become one MLX tensor: theirs when they agree, else the
    widest of their bits re-quantized (or float32 where one stays float)."""
    if all(plan == plans[0] for plan in plans):
        return plans[0]
    plans = [as_affine(plan) for plan in plans]
    source = "+".join(sorted({plan.source for plan in plans}))
    if all(plan.quantized and plan.mode == "affine" for plan in plans):
        return Plan(source, bits=max(plan.bits for plan in plans))
    return Plan(source, dtype="float32")


def as_affine(plan: Plan) -> Plan:
    """A Q6_K plan as MLX's 8-bit (re-quantized), where its rows cannot keep the kernels'
    layout (merged with other types, columns moved in runs shorter than 256); others as they are."""
    return Plan(plan.source, bits=8) if plan.mode == Q6K_MODE else plan


@dataclass
class ErrorStats:
    """How far the MLX weights are from the gguf package's dequantization of the source."""

    abs_error: float = 0.0
    abs_weight: float = 0.0
    squared_error: float = 0.0
    max_error: float = 0.0
    count: int = 0

    def add(self, reference: np.ndarray, converted: np.ndarray) -> None:
        error = np.abs(converted - reference, dtype=np.float32)
        self.abs_error += float(error.sum(dtype=np.float64))
        self.abs_weight += float(np.abs(reference).sum(dtype=np.float64))
        self.squared_error += float(np.square(error).sum(dtype=np.float64))
        self.max_error = max(self.max_error, float(error.max(initial=0.0)))
        self.count += error.size

    @property
    def relative(self) -> float:
        """Mean absolute error over mean absolute weight."""
        return self.abs_error / self.abs_weight if self.abs_weight else 0.0

    @property
    def rmse(self) -> float:
        return (self.squared_error / self.count) ** 0.5 if self.count else 0.0


def output_layout(tensor: TensorInfo, plan: Plan) -> dict[str, tuple[str, tuple[int, ...]]]:
    """What convert_blocks will produce for the whole tensor: suffix -> (dtype, shape)."""
    leading, columns = tensor.shape[:-1], tensor.columns
    if not plan.quantized:
        return {"weight": (plan.dtype, tensor.shape)}
    weight = ("uint32", (*leading, columns * plan.bits // 32))
    if plan.mode == Q6K_MODE:
        return {
            "weight": weight,
            "scales": ("int8", (*leading, columns // Q6K_GROUP)),
            "biases": ("float16", (*leading, columns // Q6K_SUPER)),
        }
    if plan.mode == "mxfp4":  # one E8M0 exponent byte per group, no biases
        return {"weight": weight, "scales": ("uint8", (*leading, columns // GROUP))}
    groups = (SCALES_DTYPE, (*leading, columns // GROUP))
    return {"weight": weight, "scales": groups, "biases": groups}


def convert_blocks(
    path: Path, tensor: TensorInfo, plan: Plan, error: ErrorStats, transform=None
) -> Iterator[tuple[int, dict]]:
    """(first row, {suffix: mx.array}) per block of rows. transform: applied to float tensors'
    values (e.g. Gemma's norm offset) before the cast."""
    import mlx.core as mx

    first_row = 0
    for raw in read_rows(path, tensor):
        arrays = dict(_convert_rows(raw, tensor, plan, transform, error))
        mx.eval(*arrays.values())
        yield first_row, arrays
        first_row += raw.shape[0]
    mx.clear_cache()  # MLX keeps freed buffers for reuse; the import wants them back


def _convert_rows(
    raw: np.ndarray, tensor: TensorInfo, plan: Plan, transform, error: ErrorStats
) -> Iterator[tuple[str, object]]:
    import mlx.core as mx

    values = _dequantize(raw, tensor)
    if not plan.quantized:
        if transform is not None:
            values = transform(values)
        yield "weight", mx.array(values).astype(getattr(mx, plan.dtype))
        return
    if plan.mode == "mxfp4":
        yield from _mxfp4_rows(raw, values, error)
        return
    if plan.mode == Q6K_MODE:
        yield from _q6k_rows(raw, values, error)
        return
    if plan.exact:
        codes, scales, biases = _affine_codes(raw, values, plan)
        packed = mx.array(_pack(codes, plan.bits))
        scales = mx.array(scales).astype(getattr(mx, SCALES_DTYPE))
        biases = mx.array(biases).astype(getattr(mx, SCALES_DTYPE))
    else:
        packed, scales, biases = mx.quantize(mx.array(values), group_size=GROUP, bits=plan.bits)
        scales = scales.astype(getattr(mx, SCALES_DTYPE))
        biases = biases.astype(getattr(mx, SCALES_DTYPE))
    # In float32, as the CPU kernels compute (a float16 result would add its own rounding).
    restored = mx.dequantize(
        packed,
        scales.astype(mx.float32),
        biases.astype(mx.float32),
        group_size=GROUP,
        bits=plan.bits,
    )
    error.add(values, np.array(restored))
    yield "weight", packed
    yield "scales", scales
    yield "biases", biases


def _dequantize(raw: np.ndarray, tensor: TensorInfo) -> np.ndarray:
    kind = GGMLQuantizationType[tensor.type_name]
    if kind == GGMLQuantizationType.F32:
        return raw.view(np.float32)
    if kind == GGMLQuantizationType.F16:
        return raw.view(np.float16).astype(np.float32)
    return gguf_quants.dequantize(raw, kind).reshape(raw.shape[0], tensor.columns)


def _mxfp4_rows(
    raw: np.ndarray, values: np.ndarray, error: ErrorStats
) -> Iterator[tuple[str, object]]:
    """GGML's MXFP4 block is the scale byte, then 16 bytes whose low nibbles are weights 0-15
    and high nibbles 16-31; MLX packs weights in order, low nibble first. Codes and scale are
    the same numbers (GGML's table holds twice E2M1's values and halves the scale)."""
    import mlx.core as mx

    rows = raw.shape[0]
    blocks = raw.reshape(rows, -1, 17)
    scales = np.ascontiguousarray(blocks[..., 0])
    nibbles = blocks[..., 1:]
    codes = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1).reshape(rows, -1)
    packed, scales = mx.array(_pack(codes, 4)), mx.array(scales)
    restored = mx.dequantize(packed, scales, group_size=GROUP, bits=4, mode="mxfp4")
    error.add(values, np.array(restored.astype(mx.float32)))
    yield "weight", packed
    yield "scales", scales


def _q6k_rows(
    raw: np.ndarray, values: np.ndarray, error: ErrorStats
) -> Iterator[tuple[str, object]]:
    """Q6_K's 210-byte block: 128 bytes of low nibbles, 64 of top bit pairs (q6k_codes), 16
    int8 scales, the float16 d; weight k of a block is d * scale[k / 16] * (code[k] - 32). The
    codes go out in the kernels' layout (pack_q6k), the scales and d as they are."""
    import mlx.core as mx

    rows = raw.shape[0]
    blocks = raw.reshape(rows, -1, 210)
    codes = q6k_codes(blocks).reshape(rows, -1)
    scales = np.ascontiguousarray(blocks[..., 192:208]).view(np.int8).reshape(rows, -1)
    d = np.ascontiguousarray(blocks[..., 208:210]).view(np.float16).reshape(rows, -1)
    packed = pack_q6k(codes)
    error.add(values, dequantize_q6k(packed, scales, d))
    yield "weight", mx.array(packed.view(np.uint32))
    yield "scales", mx.array(scales)
    yield "biases", mx.array(d)


def q6k_codes(blocks: np.ndarray) -> np.ndarray:
    """The 256 codes (0..63) of each Q6_K block [..., 210], in weight order: per half of 128
    weights, 64 bytes of low nibbles (bytes 0-31 low halves: weights 0-31, high halves: 64-95;
    bytes 32-63: 32-63 and 96-127) and 32 of top pairs (byte i: weights i, 32 + i, 64 + i,
    96 + i at bits 0, 2, 4, 6)."""
    lead = blocks.shape[:-1]
    low = blocks[..., :128].reshape(*lead, 2, 2, 32)  # half, byte run, byte
    top = blocks[..., 128:192].reshape(*lead, 2, 1, 32)
    nibbles = np.stack([low & 0x0F, low >> 4], axis=-3)  # half, nibble, run, byte
    pairs = (top >> np.array([0, 2, 4, 6], np.uint8).reshape(4, 1)) & 0x03  # half, 4, byte
    pairs = pairs.reshape(*lead, 2, 2, 2, 32)  # half, nibble, run, byte (bits 2 * (2n + r))
    return (nibbles | (pairs << 4)).reshape(*lead, 256)


def pack_q6k(codes: np.ndarray) -> np.ndarray:
    """Codes [rows, K] (0..63) in the kernels' layout, uint8 [rows, K * 3 / 4]: per 128, 64
    bytes of low nibbles (byte i: codes i and 64 + i), then 32 of top pairs (byte i: codes i,
    32 + i, 64 + i, 96 + i at bits 0, 2, 4, 6)."""
    rows = codes.shape[0]
    c = codes.reshape(rows, -1, 128).astype(np.uint8)
    low = (c[..., :64] & 0x0F) | ((c[..., 64:] & 0x0F) << 4)
    t = (c >> 4).reshape(rows, -1, 4, 32)
    top = t[..., 0, :] | (t[..., 1, :] << 2) | (t[..., 2, :] << 4) | (t[..., 3, :] << 6)
    return np.ascontiguousarray(np.concatenate([low, top], axis=-1).reshape(rows, -1))


def dequantize_q6k(packed: np.ndarray, scales: np.ndarray, d: np.ndarray) -> np.ndarray:
    """pack_q6k's bytes back to float32 weights [rows, K]: d * scale * (code - 32)."""
    rows = packed.shape[0]
    b = packed.reshape(rows, -1, 96)
    low = np.concatenate([b[..., :64] & 0x0F, b[..., :64] >> 4], axis=-1)
    top = b[..., 64:, None] >> np.array([0, 2, 4, 6], np.uint8)
    high = (top & 0x03).transpose(0, 1, 3, 2).reshape(rows, -1, 128)
    codes = (low | (high << 4)).astype(np.float32).reshape(rows, -1, 16) - 32.0
    scale = np.repeat(d.astype(np.float32), 16, axis=-1) * scales.astype(np.float32)
    return (codes * scale[..., None]).reshape(rows, -1)


def _affine_codes(
    raw: np.ndarray, values: np.ndarray, plan: Plan
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The integer codes of an exactly representable type, from its per-group scale and bias
    (read off the block headers) and the gguf package's dequantized values."""
    rows, columns = values.shape
    scales, biases = _group_affine(raw, plan.source, rows, columns // GROUP)
    safe = np.where(scales == 0, 1.0, scales)[..., None]
    grouped = values.reshape(rows, columns // GROUP, GROUP)
    codes = np.rint((grouped - biases[..., None]) / safe)
    codes = codes.clip(0, 2**plan.bits - 1).astype(np.uint8).reshape(rows, columns)
    return codes, scales, biases


def _group_affine(raw: np.ndarray, source: str, rows: int, groups: int):
    """Per 32-weight group (scale, bias) as float32 arrays of shape (rows, groups)."""
    kind = GGMLQuantizationType[source]
    size = GGML_QUANT_SIZES[kind][1]
    blocks = raw.reshape(rows, -1, size)

    def half(start: int) -> np.ndarray:
        return blocks[..., start : start + 2].copy().view(np.float16)[..., 0].astype(np.float32)

    d = half(0)
    if source in ("Q4_K", "Q5_K"):  # eight groups per block: d * sc, -dmin * m
        sc, m = gguf_quants.Q4_K.get_scale_min(blocks[..., 4:16].reshape(-1, 12))
        sc = sc.reshape(rows, -1, 8).astype(np.float32)
        m = m.reshape(rows, -1, 8).astype(np.float32)
        scales = d[..., None] * sc
        biases = -half(2)[..., None] * m
        return scales.reshape(rows, groups), biases.reshape(rows, groups)
    offset = {"Q4_0": -8.0, "Q5_0": -16.0, "Q8_0": -128.0}
    biases = d * offset[source] if source in offset else half(2)  # Q4_1, Q5_1: min m
    return d, biases


def _pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """MLX's layout: the codes of a row as one little-endian bit stream in uint32 words."""
    rows = codes.shape[0]
    if bits == 8:
        return np.ascontiguousarray(codes).view(np.uint32)
    eights = codes.reshape(rows, -1, 8).astype(np.uint64)
    stream = np.zeros(eights.shape[:-1], dtype=np.uint64)
    for i in range(8):  # eight codes make `bits` whole bytes
        stream |= eights[..., i] << np.uint64(bits * i)
    packed = stream[..., None].view(np.uint8)[..., :bits]  # little-endian machine
    return np.ascontiguousarray(packed).reshape(rows, -1).view(np.uint32)
