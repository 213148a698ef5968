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


def chat_template(placeholder: str = "<image>") -> str:
    """Content lists as OpenAI-style chat templates render them: an image part is `placeholder`
    (the token the family's processor expands)."""
    return (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n"
        "{% if m.content is string %}{{ m.content }}{% else %}"
        "{% for p in m.content %}{% if p.type == 'image' %}" + placeholder + "{% else %}"
        "{{ p.text }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )


CHAT_TEMPLATE = chat_template()

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


def _tokenizer(
    source: Path,
    destination: Path,
    image_token: str,
    named: dict[str, str] | None = None,
    placeholder: str = "<image>",
) -> tuple[int, int]:
    """SmolLM2's tokenizer plus `image_token` and the `named` special tokens (attribute name:
    token, as the family's processor reads them), saved; returns (vocabulary size, its id)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(source))
    extra = [image_token, *(t for t in (named or {}).values() if t != image_token)]
    tokenizer.add_special_tokens({"additional_special_tokens": extra})
    template = chat_template(placeholder)
    tokenizer.chat_template = template
    tokenizer.save_pretrained(str(destination))
    (destination / "chat_template.jinja").write_text(template)
    if named:
        config_file = destination / "tokenizer_config.json"
        config = json.loads(config_file.read_text())
        config["extra_special_tokens"] = named
        config_file.write_text(json.dumps(config))
    return len(tokenizer), tokenizer.convert_tokens_to_ids(image_token)


def _save_random(model_module, config: dict, destination: Path, seed: int) -> Path:
    """mlx-vlm's `model_module` Model built from `config` with random weights, saved."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    (destination / "config.json").write_text(json.dumps(config))
    mx.random.seed(seed)
    model_config = model_module.ModelConfig.from_dict(config)
    model_config.text_config = model_module.TextConfig.from_dict(config["text_config"])
    model_config.vision_config = model_module.VisionConfig.from_dict(config["vision_config"])
    model = model_module.Model(model_config)
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(destination / "model.safetensors"), weights)
    return destination


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


SMOLVLM_SIZE = 56  # (56 / 14)² = 16 patches, pixel-shuffled by 2: 4 image tokens
SMOLVLM_TOKENS = {
    "image_token": "<image>",
    "fake_image_token": "<fake_token_around_image>",
    "global_image_token": "<global-img>",
    "end_of_utterance_token": "<end_of_utterance>",
}


def build_tiny_smolvlm(tokenizer_source: Path, destination: Path, seed: int = 0) -> Path:
    """A SmolVLM (Idefics3 layout: SigLIP tower, pixel-shuffle connector, Llama), random
    weights, its image processor without image splitting (one global image of 4 tokens)."""
    from mlx_vlm.models import smolvlm

    destination.mkdir(parents=True)
    vocab_size, image_id = _tokenizer(tokenizer_source, destination, "<image>", SMOLVLM_TOKENS)
    text = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2}
    text |= {"intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2}
    text |= {"rms_norm_eps": 1e-5, "vocab_size": vocab_size, "max_position_embeddings": 1024}
    vision = {"model_type": "smolvlm_vision", "hidden_size": 32, "num_attention_heads": 4}
    vision |= {"patch_size": PATCH, "num_hidden_layers": 2, "intermediate_size": 64}
    vision |= {"image_size": SMOLVLM_SIZE}
    config = {"model_type": "smolvlm", "image_token_id": image_id, "scale_factor": 2}
    config |= {"vocab_size": vocab_size, "eos_token_id": 2}
    config |= {"text_config": text, "vision_config": vision}
    edge = {"longest_edge": SMOLVLM_SIZE}
    image_processor = {"image_processor_type": "SmolVLMImageProcessor", "do_resize": True}
    image_processor |= {"size": edge, "max_image_size": edge, "do_image_splitting": False}
    image_processor |= {"do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True}
    image_processor |= {"image_mean": [0.5] * 3, "image_std": [0.5] * 3, "do_pad": True}
    image_processor |= {"do_convert_rgb": True, "resample": 1}
    (destination / "preprocessor_config.json").write_text(json.dumps(image_processor))
    processor = {"processor_class": "SmolVLMProcessor", "image_seq_len": 4}
    (destination / "processor_config.json").write_text(json.dumps(processor))
    return _save_random(smolvlm, config, destination, seed)


GEMMA3_TOKENS = {
    "image_token": "<image_soft_token>",
    "boi_token": "<start_of_image>",
    "eoi_token": "<end_of_image>",
}


def build_tiny_gemma3(tokenizer_source: Path, destination: Path, seed: int = 0) -> Path:
    """A Gemma 3 (SigLIP tower, pooled projector, Gemma 3 text with a sliding and a global
    layer), random weights; 28 px images read as 4 soft tokens between <start_of_image> and
    <end_of_image>."""
    from mlx_vlm.models import gemma3

    destination.mkdir(parents=True)
    vocab_size, image_id = _tokenizer(
        tokenizer_source, destination, "<image_soft_token>", GEMMA3_TOKENS, "<start_of_image>"
    )
    text = {"model_type": "gemma3_text", "hidden_size": 64, "num_hidden_layers": 2}
    text |= {"intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2}
    text |= {"head_dim": 16, "query_pre_attn_scalar": 16, "vocab_size": vocab_size}
    text |= {"sliding_window": 512, "sliding_window_pattern": 2, "mm_tokens_per_image": 4}
    text |= {"max_position_embeddings": 1024}
    vision = {"model_type": "siglip_vision_model", "hidden_size": 32, "num_attention_heads": 4}
    vision |= {"patch_size": PATCH, "num_hidden_layers": 2, "intermediate_size": 64}
    vision |= {"image_size": IMAGE_SIZE}
    config = {"model_type": "gemma3", "image_token_index": image_id, "hidden_size": 64}
    config |= {"vocab_size": vocab_size, "eos_token_id": 2, "pad_token_id": 0}
    config |= {"text_config": text, "vision_config": vision}
    size = {"height": IMAGE_SIZE, "width": IMAGE_SIZE}
    image_processor = {"image_processor_type": "Gemma3ImageProcessor", "do_resize": True}
    image_processor |= {"size": size, "do_pan_and_scan": False, "do_rescale": True}
    image_processor |= {"rescale_factor": 1 / 255, "do_normalize": True, "resample": 2}
    image_processor |= {"image_mean": [0.5] * 3, "image_std": [0.5] * 3}
    image_processor |= {"do_convert_rgb": True}
    (destination / "preprocessor_config.json").write_text(json.dumps(image_processor))
    processor = {"processor_class": "Gemma3Processor", "image_seq_length": 4}
    (destination / "processor_config.json").write_text(json.dumps(processor))
    return _save_random(gemma3, config, destination, seed)
