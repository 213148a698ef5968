"""Fused and quantized kernels for MLX's CPU backend (see kernels/README.md)."""

from cpu_kernels._ext import (
    MLX_VERSION,
    attention,
    decoder_layer,
    int8_isa,
    isa,
    project_kv,
    quantized_attention,
    quantized_matmul,
    rms_norm,
    rope,
    set_threads,
    swiglu,
    threads,
    use_int8,
    use_isa,
)

__all__ = [
    "MLX_VERSION",
    "attention",
    "decoder_layer",
    "int8_isa",
    "isa",
    "project_kv",
    "quantized_attention",
    "quantized_matmul",
    "rms_norm",
    "rope",
    "set_threads",
    "swiglu",
    "threads",
    "use_int8",
    "use_isa",
]
