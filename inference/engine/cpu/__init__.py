"""The CPU kernels (the `cpu_kernels` extension built from kernels/) as the engine uses them.

MLX's CPU backend runs quantized matmuls as a scalar loop and splits RMSNorm, RoPE and
attention into chains of small primitives; on a Linux CPU the engine swaps a model's layers
for the extension's vectorized, multithreaded ones at load (`accelerate`). On Metal and CUDA,
or where the extension is missing or fails its self-test, nothing changes (`kernel_status`
says why, once in the log).
"""

from inference.engine.cpu.fused import accelerate, use_fused
from inference.engine.cpu.layers import (
    QUANTIZED_LAYERS,
    Float32Twins,
    QuantizedKernelLayer,
    on_mlx_path,
    round_activations,
    supports_quantized,
    to_float32,
)
from inference.engine.cpu.status import KernelStatus, configure, kernel_status

__all__ = [
    "QUANTIZED_LAYERS",
    "Float32Twins",
    "KernelStatus",
    "QuantizedKernelLayer",
    "accelerate",
    "configure",
    "kernel_status",
    "on_mlx_path",
    "round_activations",
    "supports_quantized",
    "to_float32",
    "use_fused",
]
