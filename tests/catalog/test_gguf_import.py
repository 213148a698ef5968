import json
from pathlib import Path

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from gguf import GGMLQuantizationType, GGUFWriter
from transformers import AutoTokenizer

from catalog.models import CatalogModel
from inference.conversion import gguf as conversion
from inference.conversion.gguf import UnsupportedGGUF, convert_gguf, inspect_gguf


def write_gguf(path: Path, architecture: str = "llama", quantized: bool = False) -> Path:
    writer = GGUFWriter(str(path), architecture)
    writer.add_name("synthetic")
    if quantized:  # one 256-weight Q8_K block per row: llama.cpp's activation type, no weights
        writer.add_tensor(
            "token_embd.weight",
            np.zeros((4, 292), dtype=np.uint8),
            raw_dtype=GGMLQuantizationType.Q8_K,
        )
    writer.add_tensor("output_norm.weight", np.ones((4,), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_converted_config(smollm_dir: Path):
    config = json.loads((smollm_dir / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["num_hidden_layers"] == 30
    assert config["rope_traditional"] is True
    assert config["tie_word_embeddings"] is True
    quantization = config["quantization"]
    assert (quantization["group_size"], quantization["bits"]) == (32, 4)
    assert quantization["model.embed_tokens"] == {"group_size": 32, "bits": 8}
    assert quantization["model.layers.29.mlp.down_proj"] == {"group_size": 32, "bits": 4}
    tokenizer_config = json.loads((smollm_dir / "tokenizer_config.json").read_text())
    assert tokenizer_config["eos_token"] == "<|im_end|>"
    assert tokenizer_config["bos_token"] == "<|im_start|>"
    assert "<|im_start|>" in tokenizer_config["chat_template"]


def test_converted_tokenizer(smollm_dir: Path):
    tokenizer = AutoTokenizer.from_pretrained(smollm_dir)
    text = "Hello world 12345 héllo 🎉\n  indented"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    assert ids[:2] == [19556, 905]  # SmolLM2's own ids for "Hello", " world"
    # SmolLM2 splits digits one by one.
    assert len(tokenizer.encode("12345", add_special_tokens=False)) == 5
    assert tokenizer.encode("<|im_start|>user", add_special_tokens=False)[0] == 1


def test_refuses_other_architectures(tmp_path: Path):
    with pytest.raises(UnsupportedGGUF, match="architecture 'gpt2' is not supported"):
        inspect_gguf(write_gguf(tmp_path / "gpt2.gguf", architecture="gpt2"))


def test_refuses_unsupported_tensor_types(tmp_path: Path):
    with pytest.raises(UnsupportedGGUF, match="tensor types Q8_K are not supported"):
        inspect_gguf(write_gguf(tmp_path / "q8k.gguf", quantized=True))


def test_refuses_files_that_are_not_gguf(tmp_path: Path):
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"definitely not a model")
    with pytest.raises(UnsupportedGGUF, match="not a readable GGUF"):
        inspect_gguf(bogus)


def test_interrupted_import_leaves_nothing(demo_gguf: Path, tmp_path: Path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(conversion, "build_tokenizer", interrupted)
    with pytest.raises(KeyboardInterrupt):
        convert_gguf(demo_gguf, tmp_path / "models" / "smol")
    assert list((tmp_path / "models").iterdir()) == []


@pytest.mark.django_db
def test_import_command_registers_the_model(demo_gguf: Path, tmp_path: Path, settings):
    settings.MODEL_STORAGE_DIR = tmp_path
    call_command(
        "import_gguf", str(demo_gguf), "--id", "smol", "--temperature", "0.2", "--alias", "gpt-*"
    )
    entry = CatalogModel.objects.get(public_id="smol")
    assert entry.default_temperature == 0.2
    assert entry.aliases == ["gpt-*"]
    assert entry.display_name == "smol"  # the id: the GGUF's general.name is its base model's
    assert entry.source == CatalogModel.Source.GGUF
    assert entry.family.slug == "chatml"  # read off the chat template
    assert Path(entry.location) == tmp_path / "smol"
    assert (tmp_path / "smol" / "model.safetensors").is_file()
    entry.full_clean()  # what admin would accept

    call_command("import_gguf", str(demo_gguf), "--id", "smol", "--if-missing")
    with pytest.raises(CommandError, match="already has a model with id 'smol'"):
        call_command("import_gguf", str(demo_gguf), "--id", "smol")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--id", "../escape"], "public_id: Use letters"),
        (["--id", "ok", "--temperature", "5"], "default_temperature: Ensure this value"),
        (["--id", "ok", "--family", "nope"], "unknown family 'nope'"),
        (["--id", "ok", "--alias", "ok"], "aliases: 'ok' is this model's own id"),
    ],
)
def test_import_command_rejects_bad_arguments(demo_gguf, tmp_path, settings, args, message):
    settings.MODEL_STORAGE_DIR = tmp_path
    with pytest.raises(CommandError, match=message):
        call_command("import_gguf", str(demo_gguf), *args)
    assert not CatalogModel.objects.exists()


@pytest.mark.django_db
def test_import_command_names_what_it_cannot_convert(tmp_path: Path, settings):
    settings.MODEL_STORAGE_DIR = tmp_path / "models"
    source = write_gguf(tmp_path / "q8k.gguf", quantized=True)
    with pytest.raises(CommandError, match="Q8_K"):
        call_command("import_gguf", str(source), "--id", "q8k")
    assert not CatalogModel.objects.exists()
    assert not (tmp_path / "models" / "q8k").exists()
