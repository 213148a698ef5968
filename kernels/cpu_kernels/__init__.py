"""Fused and quantized kernels for MLX's CPU backend (see kernels/README.md)."""

from cpu_kernels._ext import (
    MLX_VERSION,
    attention,
    int8_isa,
    isa,
    quantized_attention,
    quantized_matmul,
    rms_norm,
    rope,
    sample_rows,
    set_threads,
    swiglu,
    threads,
    top_k_indices,
    use_int8,
    use_isa,
)

__all__ = [
    "MLX_VERSION",
    "attention",
    "int8_isa",
    "isa",
    "quantized_attention",
    "quantized_matmul",
    "rms_norm",
    "rope",
    "sample_rows",
    "set_threads",
    "swiglu",
    "threads",
    "top_k_indices",
    "use_int8",
    "use_isa",
]
