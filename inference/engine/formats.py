"""The compute formats a catalog model may ask for (MLX-free, so the catalog can import it);
engine/compute_format.py decides and applies them."""

COMPUTE_FORMATS = ("auto", "quantized", "float32", "float16", "bfloat16")
