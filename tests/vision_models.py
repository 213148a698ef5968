"""Small random-weight vision-language models that mlx-vlm loads offline: mlx-vlm's own model
classes and configs, SmolLM2's real tokenizer with the family's image token added, and the
processor configs its processors read. Built once per session (tests/conftest.py)."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

IMAGE_SIZE = 28  # pixels a side the processor resizes to: (28 / 14)² = 4 image tokens
PATCH = 14

# Content lists as OpenAI-style chat templates render them: an image part is its token.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.content is string %}{{ m.content }}{% else %}"
    "{% for p in m.content %}{% if p.type == 'image' %}<image>{% else %}{{ p.text }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CLIP_PREPROCESSOR = {
    "image_processor_type": "CLIPImageProcessor",
    "do_resize": True,
    "size": {"shortest_edge": IMAGE_SIZE},
    "do_center_crop": True,
    "crop_size": {"height": IMAGE_SIZE, "width": IMAGE_SIZE},
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "do_convert_rgb": True,
    "resample": 3,
}


def _tokenizer(source: Path, destination: Path, image_token: str) -> tuple[int, int]:
    """SmolLM2's tokenizer plus `image_token`, saved; returns (vocabulary size, its id)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(source))
    tokenizer.add_special_tokens({"additional_special_tokens": [image_token]})
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(str(destination))
    (destination / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return len(tokenizer), tokenizer.convert_tokens_to_ids(image_token)


def build_tiny_llava(tokenizer_source: Path, destination: Path, seed: int = 0) -> Path:
    """A LLaVA (CLIP vision tower, projector, Llama) a few layers deep, random weights."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_vlm.models.llava import Model, ModelConfig, TextConfig, VisionConfig

    destination.mkdir(parents=True)
    vocab_size, image_id = _tokenizer(tokenizer_source, destination, "<image>")
    config = {
        "model_type": "llava",
        "image_token_index": image_id,
        "vision_feature_layer": -2,
        "vision_feature_select_strategy": "default",
        "vocab_size": vocab_size,
        "eos_token_id": 2,
        "text_config": {
            "model_type": "llama",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-5,
            "vocab_size": vocab_size,
            "max_position_embeddings": 1024,
            "tie_word_embeddings": False,
        },
        "vision_config": {
            "model_type": "clip_vision_model",
            "num_hidden_layers": 3,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_attention_heads": 4,
            "image_size": IMAGE_SIZE,
            "patch_size": PATCH,
            "projection_dim": 32,
        },
    }
    (destination / "config.json").write_text(json.dumps(config))
    (destination / "preprocessor_config.json").write_text(json.dumps(CLIP_PREPROCESSOR))
    processor = {
        "processor_class": "LlavaProcessor",
        "patch_size": PATCH,
        "vision_feature_select_strategy": "default",
        "image_token": "<image>",
        "num_additional_image_tokens": 1,
    }
    (destination / "processor_config.json").write_text(json.dumps(processor))
    mx.random.seed(seed)
    model_config = ModelConfig.from_dict(config)
    model_config.text_config = TextConfig.from_dict(config["text_config"])
    model_config.vision_config = VisionConfig.from_dict(config["vision_config"])
    model = Model(model_config)
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(destination / "model.safetensors"), weights)
    return destination


def png_bytes(color: tuple[int, int, int], size: tuple[int, int] = (32, 32), kind="PNG") -> bytes:
    """An image of two halves: `color` on the left, its inverse on the right."""
    from PIL import Image

    image = Image.new("RGB", size, color)
    inverse = tuple(255 - c for c in color)
    image.paste(Image.new("RGB", (size[0] // 2, size[1]), inverse), (size[0] // 2, 0))
    out = io.BytesIO()
    image.save(out, kind)
    return out.getvalue()


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"
