"""The compute formats a catalog model may ask for (MLX-free, so the catalog can import it);
engine/compute_format.py decides and applies them."""

COMPUTE_FORMATS = ("auto", "quantized", "float32", "float16", "bfloat16")

# How a chat model's KV cache is kept (engine/kv.py builds it): "auto" is float16 on a CPU
# (where activations are float32, twice llama.cpp's f16 otherwise) and the model's own
# format on a GPU; "8bit" and "4bit" are MLX's affine layout (group 64).
KV_CACHE_FORMATS = ("auto", "float16", "8bit", "4bit")
