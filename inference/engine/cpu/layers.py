"""Layers that compute with the cpu_kernels extension, swapped into a loaded model.

Each keeps its parameters under MLX's names, so the model's parameter tree (and its size) is
unchanged; activations stay float32, the format the kernels take and MLX's CPU ops run
fastest in.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_unflatten
from mlx_lm.models.mla import MultiLinear, QuantizedMultiLinear
from mlx_lm.models.switch_layers import QuantizedSwitchLinear, SwitchLinear

from inference.engine.cpu import hooks
from inference.engine.cpu.ext import ext

log = logging.getLogger(__name__)

BITS = (4, 8)
# mlx-lm's quantized layers of stacked matrices: a mixture's experts, MLA's per-head matrices.
STACKED = (QuantizedSwitchLinear, QuantizedMultiLinear)
GROUPS = (32, 64, 128)


def supports_quantized(module: nn.Module) -> bool:
    """Whether the kernels take this quantized layer (affine 4 or 8 bits, groups 32-128)."""
    return (
        isinstance(module, (nn.QuantizedLinear, nn.QuantizedEmbedding, *STACKED))
        and getattr(module, "mode", "affine") == "affine"
        and module.get("biases") is not None
        and module.get("global_scale") is None
        and module.bits in BITS
        and module.group_size in GROUPS
    )


# Columns the kernels' x8 layout interleaves (kernels/src/qmm.h, x8_vnni.cpp): a linear's
# weights read as one stream in decode. Measured on the 2-core Zen 5 VM, 40 distinct
# 2048x6144 4-bit g32 products from memory, paired in one run: 1 row 0.33-0.43 ms against
# 0.35-0.48 for MLX's layout; 2 / 4 / 8 rows 0.39 / 0.56 / 1.01 ms against 0.47 / 0.78 / 1.44.
X8 = 8
_LAYOUT = {"x8": True}  # mlx_layout() turns it off


@contextmanager
def mlx_layout() -> Iterator[None]:
    """Layers made inside keep MLX's layout: benchmarks comparing the layouts, or the float
    path, which reads only MLX's."""
    _LAYOUT["x8"] = False
    try:
        yield
    finally:
        _LAYOUT["x8"] = True


def x8_here(out_features: int) -> bool:
    """Whether weights of `out_features` take the x8 layout here: a multiple of 8, kernels that
    read it (AVX-512 VNNI), and no mlx_layout() around."""
    return _LAYOUT["x8"] and out_features % X8 == 0 and ext is not None and ext.x8_isa() != "none"


def x8_weights(module: nn.Module) -> bool:
    """Whether a linear's weights take the x8 layout here: 4 or 8 bits (Q6_K's layers have
    their own, cpu/q6k_weights.py) and x8_here."""
    return module.bits in BITS and x8_here(module["weight"].shape[0])


def interleaved(weight: mx.array, scales: mx.array, biases: mx.array) -> tuple:
    """MLX's packed weights (uint32 [N, K * bits / 32]) in the x8 layout: uint8 [N, K * bits / 8],
    16 bytes of each of eight columns side by side, then the next 16; scales and biases eight
    per group alike. Evaluated, so that the source's arrays can go."""
    # The kernels' copy on every core (MLX's strided transpose took 0.7 s for 1 GB).
    out = (
        ext.interleave8(mx.view(weight, mx.uint8), 16),
        ext.interleave8(scales, scales.itemsize),
        ext.interleave8(biases, biases.itemsize),
    )
    mx.eval(out)
    return out


def x8_columns(weight: mx.array, scales: mx.array, biases: mx.array, index=None) -> tuple:
    """An x8 layout's columns (all, or those of `index`) back as each column's own bytes (uint8
    [..., nbytes]) and parameters ([..., per column]), whatever the bits: its 16-byte units and
    its parameters lie eight columns side by side (Q6_K's too, cpu/q6k_weights.py)."""
    n, nbytes = weight.shape
    units = weight.reshape(n // X8, nbytes // 16, X8, 16)
    params = [a.reshape(n // X8, -1, X8) for a in (scales, biases)]
    if index is None:
        columns = units.transpose(0, 2, 1, 3).reshape(n, nbytes)
        return columns, *(p.transpose(0, 2, 1).reshape(n, -1) for p in params)
    block, column = index // X8, index % X8
    columns = units[block, :, column, :].reshape(*index.shape, nbytes)
    return columns, *(p[block, :, column] for p in params)


def deinterleaved(weight: mx.array, scales: mx.array, biases: mx.array) -> tuple:
    """The x8 layout's arrays back in MLX's (interleaved's inverse)."""
    columns, scales, biases = x8_columns(weight, scales, biases)
    return mx.view(columns, mx.uint32), scales, biases


def in_features(module: nn.Module) -> int:
    """A quantized layer's input features, in either layout (x8's weights are bytes)."""
    per_element = 8 if module["weight"].dtype == mx.uint8 else 32
    return module["weight"].shape[-1] * per_element // module.bits


def _packed(module: nn.Module) -> tuple:
    """A kernel layer's weights as the product primitives take them, after x (and experts)."""
    return module["weight"], module["scales"], module["biases"], module.group_size, module.bits


def _matmul(module: nn.Module, x: mx.array) -> mx.array:
    return ext.quantized_matmul(x, *_packed(module), x_bytes=module.x_bytes)


class QuantizedKernelLayer(nn.Module):
    """A quantized layer computed by the kernels (packed weight, scales, biases as MLX's).
    `x_bytes`: the bytes its integer paths (decode's few rows, prompts' tiles) round each
    activation to, 2 (15 bits) unless round_activations made it 1 (8 bits, llama.cpp's Q8)."""

    def __init__(self, source: nn.Module) -> None:
        super().__init__()
        self.weight, self.scales, self.biases = source.weight, source.scales, source.biases
        self.group_size, self.bits = source.group_size, source.bits
        self.x_bytes = 2
        self.freeze()

    def mlx_packed(self) -> tuple:
        """weight, scales, biases in MLX's packed layout (what mx.dequantize reads)."""
        arrays = self["weight"], self["scales"], self["biases"]
        return deinterleaved(*arrays) if arrays[0].dtype == mx.uint8 else arrays

    def dequantized(self) -> mx.array:
        """The weights in float32."""
        return mx.dequantize(*self.mlx_packed(), self.group_size, self.bits).astype(mx.float32)


# Every quantized layer a model may hold: MLX's own and the kernels'.
QUANTIZED_LAYERS = (nn.QuantizedLinear, nn.QuantizedEmbedding, *STACKED, QuantizedKernelLayer)


def _interleave(layer: QuantizedKernelLayer) -> None:
    """The layer's weights in the x8 layout where the kernels read it (x8_weights): uint8
    where MLX's are uint32, so that nothing reads them as MLX's unawares (mx.dequantize refuses
    them; mlx_packed() gives MLX's)."""
    if x8_weights(layer):
        layer.weight, layer.scales, layer.biases = interleaved(
            layer["weight"], layer["scales"], layer["biases"]
        )


class KernelLinear(QuantizedKernelLayer):
    def __init__(self, source: nn.QuantizedLinear) -> None:
        super().__init__(source)
        _interleave(self)
        if "bias" in source:
            self.bias = source.bias.astype(mx.float32)

    def __call__(self, x: mx.array) -> mx.array:
        y = _matmul(self, x)
        return y + self["bias"] if "bias" in self else y


class KernelEmbedding(QuantizedKernelLayer):
    """Token rows, and the output head where the embeddings are tied (as_linear): x8 too, so
    that the largest product of a step reads as one stream; a lookup gathers each row's
    16-byte units from its block of eight."""

    def __init__(self, source: nn.QuantizedEmbedding) -> None:
        super().__init__(source)
        _interleave(self)

    def __call__(self, x: mx.array) -> mx.array:
        weight, scales, biases = self["weight"], self["scales"], self["biases"]
        if weight.dtype == mx.uint8:
            columns, scales, biases = x8_columns(weight, scales, biases, x)
            weight = mx.view(columns, mx.uint32)
        else:
            weight, scales, biases = weight[x], scales[x], biases[x]
        rows = mx.dequantize(weight, scales, biases, group_size=self.group_size, bits=self.bits)
        return rows.astype(mx.float32)

    def as_linear(self, x: mx.array) -> mx.array:
        return _matmul(self, x)


def _gathered(module: nn.Module, x: mx.array, indices: mx.array) -> mx.array:
    """As mx.gather_qmm(x, w, rhs_indices=indices, transpose=True) over stacked matrices
    w [E, N, K]: x [..., M, K] and indices broadcast over the leading axes; out [*batch, M, N]."""
    batch = mx.broadcast_shapes(x.shape[:-2], indices.shape)
    rows, features = x.shape[-2:]
    x = mx.broadcast_to(x, (*batch, rows, features)).reshape(-1, features)
    experts = mx.broadcast_to(indices[..., None], (*batch, rows)).reshape(-1)
    y = ext.gather_quantized_matmul(x, experts, *_packed(module), x_bytes=module.x_bytes)
    return y.reshape(*batch, rows, -1)


class KernelSwitchLinear(QuantizedKernelLayer):
    """mlx-lm's QuantizedSwitchLinear (a mixture's stacked experts) in the kernels: each row
    of x through the expert `indices` picks for it, the rows of a step grouped by expert."""

    def __init__(self, source: QuantizedSwitchLinear) -> None:
        super().__init__(source)
        if "bias" in source:
            self.bias = source.bias.astype(mx.float32)

    def __call__(self, x: mx.array, indices: mx.array, sorted_indices: bool = False) -> mx.array:
        # `sorted_indices` is a hint for MLX's kernel; the kernels group rows by expert.
        del sorted_indices
        y = _gathered(self, x, indices)
        if "bias" in self:
            y = y + mx.expand_dims(self["bias"][indices], -2)
        return y


class KernelMultiLinear(QuantizedKernelLayer):
    """mlx-lm's QuantizedMultiLinear (MLA's per-head matrices w [H, N, K]) in the kernels:
    x [..., H, L, K] times each head's matrix is the gathered product with one expert per
    head. Transposed the other way (x [..., L, N] @ w[h], a prompt's keys from the latent)
    it dequantizes once per call and multiplies in float32 (BLAS), not MLX's scalar loop."""

    def __call__(self, x: mx.array, transpose: bool = True) -> mx.array:
        if transpose:
            return _gathered(self, x, mx.arange(self["weight"].shape[0]))
        return x.astype(mx.float32) @ self.dequantized()


class KernelRMSNorm(nn.Module):
    def __init__(self, source: nn.RMSNorm) -> None:
        super().__init__()
        self.weight = source.weight.astype(mx.float32)
        self.eps = source.eps

    def __call__(self, x: mx.array) -> mx.array:
        return ext.rms_norm(x, self["weight"], self.eps)


class KernelDepthwiseConv1d(nn.Module):
    """nn.Conv1d with one filter per channel (stride and dilation 1): the short causal
    convolution of linear attention (Qwen3.5, Qwen3-Next), Mamba (Granite 4, Nemotron-H) and
    LFM2. MLX's CPU backend runs it as one BLAS call per channel: 8,192 a layer at
    Qwen3.5-9B's width, most of a decode step."""

    def __init__(self, source: nn.Conv1d) -> None:
        super().__init__()
        self.weight = source.weight.astype(mx.float32)
        if "bias" in source:
            self.bias = source.bias.astype(mx.float32)
        self.padding = source.padding

    def __call__(self, x: mx.array) -> mx.array:
        y = ext.depthwise_conv1d(x, self["weight"], self.padding)
        return y + self["bias"] if "bias" in self else y


def is_depthwise(module: nn.Module) -> bool:
    if type(module) is not nn.Conv1d or module.stride != 1 or module.dilation != 1:
        return False
    channels, _, per_group = module.weight.shape
    return per_group == 1 and module.groups == channels


class KernelRoPE(nn.Module):
    def __init__(self, source: nn.RoPE) -> None:
        super().__init__()
        self.dims, self.traditional = source.dims, source.traditional
        self.base, self.scale = source.base, source.scale

    def __call__(self, x: mx.array, offset: int | mx.array = 0) -> mx.array:
        if x.ndim not in (3, 4):
            return mx.fast.rope(
                x,
                self.dims,
                traditional=self.traditional,
                base=self.base,
                scale=self.scale,
                offset=offset,
            )
        if not isinstance(offset, mx.array):
            offset = mx.array(offset, dtype=mx.int32)
        return ext.rope(
            x,
            self.dims,
            traditional=self.traditional,
            base=self.base,
            scale=self.scale,
            offset=offset,
        )


def _replacement(module: nn.Module) -> nn.Module | None:
    if isinstance(module, nn.QuantizedLinear) and supports_quantized(module):
        return KernelLinear(module)
    if isinstance(module, nn.QuantizedEmbedding) and supports_quantized(module):
        return KernelEmbedding(module)
    if isinstance(module, QuantizedSwitchLinear) and supports_quantized(module):
        return KernelSwitchLinear(module)
    if isinstance(module, QuantizedMultiLinear) and supports_quantized(module):
        return KernelMultiLinear(module)
    # Exact classes only: subclasses (Gemma's 1 + weight norm, scaled RoPEs) compute otherwise.
    if type(module) is nn.RMSNorm:
        return KernelRMSNorm(module)
    if type(module) is nn.RoPE and module.base is not None:
        return KernelRoPE(module)
    if is_depthwise(module):
        return KernelDepthwiseConv1d(module)
    return None


def on_mlx_path(model: nn.Module) -> Counter[str]:
    """The quantized layers left to MLX's own (scalar, on a CPU) quantized matmuls once the
    kernels' are swapped in, by kind: those the kernels do not take (other bit widths,
    groups or modes) and what they have no layer for."""
    left = Counter()
    for _, module in model.named_modules():
        own = isinstance(module, QuantizedKernelLayer)
        if not own and "scales" in module and isinstance(module.get("weight"), mx.array):
            left[type(module).__name__] += 1
    return left


def _float32_elsewhere(model: nn.Module) -> None:
    """Norm weights, biases, unquantized layers in float32, so activations stay float32."""
    for _, module in model.named_modules():
        if isinstance(module, QUANTIZED_LAYERS):
            continue
        for name, value in list(module.items()):
            floating = isinstance(value, mx.array) and mx.issubdtype(value.dtype, mx.floating)
            if floating and value.dtype != mx.float32:
                module[name] = value.astype(mx.float32)


def accelerate(model: nn.Module) -> Counter:
    """Swaps in the kernels' layers (the caller checked kernel_status()); returns what it
    swapped, by kind."""
    # `is not None`: a module is a dict, and one without arrays (a RoPE) is falsy.
    swaps = []
    for name, module in list(model.named_modules()):
        if (new := _replacement(module)) is not None:
            # One at a time: a linear's x8 copy replaces its source before the next is made,
            # so a load holds one layer twice at most, not every linear.
            model.update_modules(tree_unflatten([(name, new)]))
            swaps.append((name, new))
    _float32_elsewhere(model)
    mx.eval(model.parameters())
    swapped = Counter(type(new).__name__ for _, new in swaps)
    swapped.update(hooks.install(model))
    log.debug("CPU kernels swapped in: %s", dict(swapped))
    return swapped


def round_activations(model: nn.Module, bits: int) -> int:
    """Sets how the kernels' integer paths round the activations of every quantized
    layer it holds: 15 bits (two bytes, the default) or 8 (one byte, as llama.cpp's Q8
    activations: half the integer products a weight). Returns the layers set; the fused
    blocks read their linears' setting."""
    if bits not in (8, 15):
        raise ValueError(f"activations round to 8 or 15 bits, not {bits}")
    count = 0
    for _, module in model.named_modules():
        if isinstance(module, QuantizedKernelLayer):
            module.x_bytes = 1 if bits == 8 else 2
            count += 1
    return count


def _dense(module: nn.Module) -> nn.Module | None:
    """A float32 nn.Linear, nn.Embedding, SwitchLinear or MultiLinear with the quantized
    layer's weights."""
    if not isinstance(module, QUANTIZED_LAYERS):
        return None
    if isinstance(module, QuantizedKernelLayer):
        weight = module.dequantized()
    else:
        weight = mx.dequantize(
            module["weight"],
            module["scales"],
            module.get("biases"),
            module.group_size,
            module.bits,
            mode=getattr(module, "mode", "affine"),
        ).astype(mx.float32)
    if isinstance(module, (KernelEmbedding, nn.QuantizedEmbedding)):
        dense = nn.Embedding(*weight.shape)
    elif isinstance(module, (KernelSwitchLinear, QuantizedSwitchLinear)):
        experts, outputs, inputs = weight.shape
        dense = SwitchLinear(inputs, outputs, experts, bias="bias" in module)
        if "bias" in module:
            dense.bias = module["bias"].astype(mx.float32)
    elif isinstance(module, (KernelMultiLinear, QuantizedMultiLinear)):
        heads, outputs, inputs = weight.shape
        dense = MultiLinear(inputs, outputs, heads)
    else:
        dense = nn.Linear(weight.shape[1], weight.shape[0], bias="bias" in module)
        if "bias" in module:
            dense.bias = module["bias"].astype(mx.float32)
    dense.weight = weight
    return dense


class Float32Twins:
    """Float32 copies of the quantized layers inside some modules, swapped in and out at will
    (to time a step both ways)."""

    def __init__(self, modules: list[nn.Module]) -> None:
        self._pairs = []  # (parent, name, quantized, dense)
        for parent in modules:
            for name, module in parent.named_modules():
                dense = _dense(module)
                if dense is not None:
                    self._pairs.append((parent, name, module, dense))
        mx.eval([pair[3].parameters() for pair in self._pairs])

    def use(self, dense: bool) -> None:
        by_parent: dict[int, tuple[nn.Module, list]] = {}
        for parent, name, quantized, twin in self._pairs:
            swaps = by_parent.setdefault(id(parent), (parent, []))[1]
            swaps.append((name, twin if dense else quantized))
        for parent, swaps in by_parent.values():
            parent.update_modules(tree_unflatten(swaps))


def to_float32(modules: list[nn.Module]) -> None:
    """Replaces the quantized layers inside each module by float32 ones, for good."""
    for parent in modules:
        swaps = [(n, d) for n, m in parent.named_modules() if (d := _dense(m)) is not None]
        parent.update_modules(tree_unflatten(swaps))
