"""The compute formats a catalog model may ask for (MLX-free, so the catalog can import it);
engine/compute_format.py decides and applies them."""

COMPUTE_FORMATS = ("auto", "quantized", "float32", "float16", "bfloat16")

# How the CPU kernels' direct integer path (decode's few rows a product) rounds activations:
# "15bit" (two bytes a value, within ~1e-4 of float32: the default) or "8bit" (one byte, as
# llama.cpp's Q8 activations: half the integer products a weight, decode ~10-17% faster at
# 1-2B on two cores; its next-token choices differ from float32's more often). It applies to
# the stored 4/8-bit weights computed by the kernels only: refused with a float compute format
# at save (activations_refusal), and at load where the kernels do not run.
ACTIVATION_ROUNDINGS = ("15bit", "8bit")


def activations_refusal(compute_format: str, activations: str) -> str | None:
    """Why this activation rounding cannot apply with this compute format (None: it may)."""
    if activations == "8bit" and compute_format in ("float32", "float16", "bfloat16"):
        return (
            f"8bit activations apply to the stored quantized weights in the CPU kernels, "
            f"not to {compute_format} weights"
        )
    return None


# How a chat model's KV cache is kept (engine/kv.py builds it): "auto" is float16 on a CPU
# (where activations are float32, twice llama.cpp's f16 otherwise) and the model's own
# format on a GPU; "8bit" and "4bit" are MLX's affine layout (group 64, or 32 where a width
# needs it), refused where they cannot apply: at save from the config (kv_refusal), at load
# from the caches themselves (engine/kv.py).
KV_CACHE_FORMATS = ("auto", "float16", "8bit", "4bit")

# Architectures with no attention at all: nothing for a quantized KV cache to hold.
ATTENTION_FREE = frozenset({"mamba", "mamba2", "rwkv", "rwkv6", "rwkv7", "recurrent_gemma"})
QUANTIZED_KV = ("8bit", "4bit")


def declared_kv_widths(config: dict) -> set[int]:
    """The widths a model's K/V caches hold, as its config.json declares them: an MLA latent
    and its rope part (DeepSeek, Kimi, GLM-4.7-Flash), else each head's (and Gemma 4's wider
    global heads)."""
    text = config.get("text_config") or config
    if text.get("kv_lora_rank"):
        return {int(text["kv_lora_rank"]), int(text.get("qk_rope_head_dim") or 64)}
    heads = text.get("num_attention_heads") or 1
    head = text.get("head_dim") or (text.get("hidden_size") or 0) // heads
    return {int(w) for w in (head, text.get("global_head_dim")) if w}


def kv_refusal(config: dict, kind: str) -> str | None:
    """Why a quantized KV cache cannot apply to this model, from its config (None: it may; the
    engine checks the caches themselves again when it loads the model)."""
    if kind not in QUANTIZED_KV:
        return None
    text = config.get("text_config") or config
    if text.get("model_type") in ATTENTION_FREE or config.get("model_type") in ATTENTION_FREE:
        return f"{kind} cannot apply: the model has no attention layers to keep K/V for"
    odd = sorted(w for w in declared_kv_widths(config) if w % 32)
    if odd:
        return f"{kind} cannot apply: its K/V widths {odd} are not multiples of 32"
    return None
