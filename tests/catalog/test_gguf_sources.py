"""Importing GGUF models that Ollama and LM Studio downloaded: folders laid out as those tools
leave them (real sha256 digests, the demo GGUF as the model blob), found by name, listed, and
converted by `manage.py import_gguf`; and every way a name can fail, each said precisely."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from catalog.gguf_header import quantization_from_header, quantization_from_name
from catalog.gguf_sources import (
    OllamaName,
    SourceError,
    default_model_id,
    list_lmstudio,
    list_ollama,
    read_lmstudio,
    read_ollama,
)
from catalog.models import CatalogModel
from tests.support.gguf_layouts import (
    MEDIA,
    SMOLLM_SYSTEM,
    SMOLLM_TEMPLATE,
    add_lmstudio_file,
    add_smollm,
    blob,
    ollama_layers,
    sha256_of_file,
    write_manifest,
)

LMSTUDIO_REPO = "lmstudio-community/SmolLM2-135M-Instruct-GGUF"
LMSTUDIO_FILE = f"{LMSTUDIO_REPO}/SmolLM2-135M-Instruct-Q4_1.gguf"
GEMMA_TEMPLATE = "<start_of_turn>user\n{{ .Prompt }}<end_of_turn>\n<start_of_turn>model\n"


@pytest.fixture(scope="session")
def ollama_dir(demo_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An Ollama models folder: the demo model, and one of each kind of trouble."""
    models = tmp_path_factory.mktemp("ollama") / "models"
    add_smollm(models, demo_gguf)
    add_smollm(models, demo_gguf, "someone/smollm2:135m-q4_1")
    gemma = ollama_layers(models, demo_gguf, template=GEMMA_TEMPLATE, params={"temperature": 1})
    write_manifest(models, "gemma-style:latest", gemma)
    vision = [*ollama_layers(models, demo_gguf), blob(models, MEDIA + "projector", b"clip")]
    write_manifest(models, "vision:latest", vision)
    lora = [*ollama_layers(models, demo_gguf), blob(models, MEDIA + "adapter", b"lora")]
    write_manifest(models, "lora:latest", lora)
    missing = ollama_layers(models, demo_gguf, template=SMOLLM_TEMPLATE)
    missing[0] = {**missing[0], "digest": "sha256:" + "0" * 64}
    write_manifest(models, "missing-blob:latest", missing)
    truncated = ollama_layers(models, demo_gguf)
    truncated[0] = {**truncated[0], "size": truncated[0]["size"] + 1}
    write_manifest(models, "truncated:latest", truncated)
    bad = models / "manifests/registry.ollama.ai/library/bad-manifest/latest"
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    return models


@pytest.fixture(scope="session")
def lmstudio_dir(demo_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An LM Studio models folder: the demo model beside its projector, a repo with two
    quantizations, and a split GGUF. Files other than the demo are a few stand-in bytes."""
    models = tmp_path_factory.mktemp("lmstudio") / "models"
    add_lmstudio_file(models, LMSTUDIO_FILE, demo_gguf)
    add_lmstudio_file(models, f"{LMSTUDIO_REPO}/mmproj-SmolLM2-f16.gguf", b"GGUF-projector")
    add_lmstudio_file(models, "bartowski/Two-GGUF/two-Q4_1.gguf", b"GGUF")
    add_lmstudio_file(models, "bartowski/Two-GGUF/two-Q8_0.gguf", b"GGUF")
    for part in (1, 2, 3):
        add_lmstudio_file(models, f"bartowski/Split-GGUF/split-Q8_0-0000{part}-of-00003.gguf", b"")
    return models


@pytest.fixture
def folders(db, settings, ollama_dir, lmstudio_dir, tmp_path):
    settings.OLLAMA_MODELS_DIR = ollama_dir
    settings.LMSTUDIO_MODELS_DIR = lmstudio_dir
    settings.MODEL_STORAGE_DIR = tmp_path / "converted"


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("import_gguf", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_the_layout_is_ollamas(ollama_dir, demo_gguf):
    manifest = ollama_dir / "manifests/registry.ollama.ai/library/smollm2/latest"
    layers = {layer["mediaType"]: layer for layer in json.loads(manifest.read_text())["layers"]}
    model = layers[MEDIA + "model"]
    assert model["digest"] == f"sha256:{sha256_of_file(demo_gguf)}"
    assert (ollama_dir / "blobs" / model["digest"].replace(":", "-")).stat().st_size == model[
        "size"
    ]


@pytest.mark.parametrize(
    "name, parsed, shown, model_id",
    [
        ("llama3.2", ("registry.ollama.ai", "library", "llama3.2", "latest"), "llama3.2:latest",
         "llama3.2"),
        ("llama3.2:1b", ("registry.ollama.ai", "library", "llama3.2", "1b"), "llama3.2:1b",
         "llama3.2-1b"),
        ("user/Model:Q4_K_M", ("registry.ollama.ai", "user", "Model", "Q4_K_M"),
         "user/Model:Q4_K_M", "user-model-q4_k_m"),
        ("hf.co/org/repo-GGUF:Q8_0", ("hf.co", "org", "repo-GGUF", "Q8_0"),
         "hf.co/org/repo-GGUF:Q8_0", "hf.co-org-repo-gguf-q8_0"),
        ("localhost:5000/ns/m", ("localhost:5000", "ns", "m", "latest"),
         "localhost:5000/ns/m:latest", "localhost-5000-ns-m"),
    ],
)  # fmt: skip
def test_ollama_names(name, parsed, shown, model_id):
    ollama_name = OllamaName.parse(name)
    assert (ollama_name.host, ollama_name.namespace, ollama_name.model, ollama_name.tag) == parsed
    assert str(ollama_name) == shown
    assert default_model_id("ollama", name) == model_id


@pytest.mark.parametrize("name", ["", "a/b/c/d", "../etc:passwd", "model:../../x", "a//b"])
def test_ollama_names_that_are_not_names(name):
    with pytest.raises(SourceError, match="is not an Ollama model name"):
        OllamaName.parse(name)


def test_quantization_from_file_names_and_headers(demo_gguf):
    assert quantization_from_header(demo_gguf) == "Q4_1"  # general.file_type
    assert quantization_from_header(Path(__file__)) is None
    assert quantization_from_name("Llama-3.2-1B-Instruct-Q4_K_M.gguf") == "Q4_K_M"
    assert quantization_from_name("qwen2.5-0.5b-instruct-fp16.gguf") == "F16"
    assert quantization_from_name("m-IQ4_XS-00001-of-00002.gguf") == "IQ4_XS"
    assert quantization_from_name("Meta-Llama-3-8B.gguf") is None


def test_reading_an_ollama_model(ollama_dir):
    model = read_ollama(ollama_dir, "smollm2")
    assert model.name == "smollm2:latest"
    assert model.gguf.name.startswith("sha256-") and model.quantization == "Q4_1"
    assert model.template == SMOLLM_TEMPLATE and model.system == SMOLLM_SYSTEM
    assert model.family_slug == "chatml"
    assert model.catalog_defaults() == {
        "default_temperature": 0.2,
        "default_top_p": 0.9,
        "default_max_tokens": 256,
        "system_prompt": SMOLLM_SYSTEM,
    }
    assert model.ignored_params() == ["num_ctx", "stop"]
    assert model.notes == ()  # the license layer is read past without a word
    assert read_ollama(ollama_dir, "gemma-style").family_slug == "gemma"
    vision = read_ollama(ollama_dir, "vision:latest")
    assert vision.notes == ("its vision projector is not imported: the model will read text only",)


def test_import_from_ollama_by_name(folders, settings):
    out = run("--ollama", "smollm2")
    entry = CatalogModel.objects.get(public_id="smollm2")
    assert entry.family.slug == "chatml"
    assert entry.source == CatalogModel.Source.GGUF
    assert (entry.default_temperature, entry.default_top_p) == (0.2, 0.9)
    assert entry.default_max_tokens == 256
    assert entry.system_prompt == SMOLLM_SYSTEM
    assert entry.display_name == "smollm2:latest"  # as `ollama list` shows it
    assert entry.aliases == []  # `smollm2:latest` is its id's twin: it resolves already
    folder = Path(entry.location)
    assert folder == settings.MODEL_STORAGE_DIR / "smollm2"
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (folder / name).is_file(), name
    assert json.loads((folder / "config.json").read_text())["model_type"] == "llama"
    assert "note: Ollama parameters not applied: num_ctx, stop" in out
    assert "as smollm2 (" in out
    with pytest.raises(CommandError, match="the catalog already has a model with id 'smollm2'"):
        run("--ollama", "smollm2")


def test_command_options_win_over_ollamas(folders):
    run(
        "--ollama", "someone/smollm2:135m-q4_1",
        "--family", "llama", "--temperature", "0.7", "--max-tokens", "64", "--name", "Mine",
    )  # fmt: skip
    entry = CatalogModel.objects.get(public_id="someone-smollm2-135m-q4_1")
    assert entry.family.slug == "llama" and entry.display_name == "Mine"
    assert entry.aliases == ["someone/smollm2:135m-q4_1"]  # what Ollama's clients send
    assert (entry.default_temperature, entry.default_max_tokens) == (0.7, 64)
    assert entry.default_top_p == 0.9 and entry.system_prompt == SMOLLM_SYSTEM  # Ollama's


def test_ollamas_template_decides_the_family_before_the_gguf(db, ollama_dir):
    from catalog.management.commands.import_gguf import detected_family

    ollama = read_ollama(ollama_dir, "gemma-style").family_slug
    assert detected_family(ollama, "chatml").slug == "gemma"
    assert detected_family(None, "chatml").slug == "chatml"
    assert detected_family("no-such-family", "chatml").slug == "chatml"


def test_import_from_lmstudio_by_repo(folders, settings):
    out = run("--lmstudio", LMSTUDIO_REPO)  # one model file there, beside its mmproj
    entry = CatalogModel.objects.get(public_id="smollm2-135m-instruct-q4_1")
    assert entry.family.slug == "chatml"  # from the GGUF's own chat template
    assert entry.default_temperature is None and entry.system_prompt == ""
    assert (Path(entry.location) / "model.safetensors").is_file()
    assert "imported SmolLM2-135M-Instruct-Q4_1.gguf as smollm2-135m-instruct-q4_1" in out
    assert entry.aliases == [LMSTUDIO_FILE, LMSTUDIO_REPO]  # what LM Studio's clients send
    assert entry.display_name == LMSTUDIO_FILE


def test_list_shows_both_folders(folders, ollama_dir, lmstudio_dir):
    lines = run("--list").splitlines()
    assert lines[0] == f"Ollama ({ollama_dir}): 8 model(s)"
    smollm = next(line for line in lines if line.strip().startswith("smollm2:latest"))
    blob_path = read_ollama(ollama_dir, "smollm2").gguf
    assert smollm.split() == ["smollm2:latest", "93.8", "MiB", "Q4_1", str(blob_path)]
    lora = next(line for line in lines if "lora:latest" in line)
    assert "cannot be imported: lora:latest has a LoRA adapter layer" in lora
    lmstudio = lines.index(f"LM Studio ({lmstudio_dir}): 6 model(s)")
    listed = {line.split()[0]: line for line in lines[lmstudio + 1 :]}
    assert sorted(listed) == [
        "bartowski/Split-GGUF/split-Q8_0-00001-of-00003.gguf",
        "bartowski/Split-GGUF/split-Q8_0-00002-of-00003.gguf",
        "bartowski/Split-GGUF/split-Q8_0-00003-of-00003.gguf",
        "bartowski/Two-GGUF/two-Q4_1.gguf",
        "bartowski/Two-GGUF/two-Q8_0.gguf",
        LMSTUDIO_FILE,
    ]  # no mmproj projector
    assert listed[LMSTUDIO_FILE].split()[1:] == [
        "93.8", "MiB", "Q4_1", str(lmstudio_dir / LMSTUDIO_FILE)
    ]  # fmt: skip
    assert listed["bartowski/Two-GGUF/two-Q8_0.gguf"].split()[1:4] == ["4", "B", "Q8_0"]
    assert (
        "cannot be imported: split-Q8_0-00002-of-00003.gguf is part 2 of a GGUF split"
        in (listed["bartowski/Split-GGUF/split-Q8_0-00002-of-00003.gguf"])
    )


def test_list_says_when_a_folder_is_missing(settings, tmp_path):
    settings.OLLAMA_MODELS_DIR = tmp_path / "no-ollama"
    settings.LMSTUDIO_MODELS_DIR = tmp_path / "empty"
    (tmp_path / "empty").mkdir()
    assert run("--list").splitlines() == [
        f"Ollama: no folder {tmp_path / 'no-ollama'} (set OLLAMA_MODELS_DIR)",
        f"LM Studio ({tmp_path / 'empty'}): 0 model(s)",
    ]


def missing_blob_message(ollama_dir: Path) -> str:
    path = ollama_dir / "blobs" / ("sha256-" + "0" * 64)
    return (
        f"missing-blob:latest: the blob of its model layer is missing ({path}, "
        f"sha256:{'0' * 64}); `ollama pull missing-blob:latest` fetches it again"
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--ollama", "nope"],
            "Ollama has no model 'nope:latest' in {ollama} (no manifest "
            "{ollama}/manifests/registry.ollama.ai/library/nope/latest); `ollama list` shows "
            "the names, `ollama pull` fetches one",
        ),
        (["--ollama", "missing-blob"], None),
        (
            ["--ollama", "lora"],
            "lora:latest has a LoRA adapter layer (application/vnd.ollama.image.adapter): "
            "adapters are not supported; import its base model instead",
        ),
        (
            ["--ollama", "bad-manifest"],
            "the manifest {ollama}/manifests/registry.ollama.ai/library/bad-manifest/latest is "
            "not JSON: Expecting property name enclosed in double quotes: line 1 column 2 "
            "(char 1)",
        ),
        (["--ollama", "truncated"], "(an interrupted download?)"),
        (["--ollama", "a/b/c/d"], "'a/b/c/d' is not an Ollama model name"),
        (
            ["--lmstudio", "bartowski/Two-GGUF"],
            "bartowski/Two-GGUF holds several GGUF files; name one as "
            "bartowski/Two-GGUF/FILE.gguf: two-Q4_1.gguf, two-Q8_0.gguf",
        ),
        (
            ["--lmstudio", "bartowski/Split-GGUF"],
            "split-Q8_0-00001-of-00003.gguf is part 1 of a GGUF split into 3 files: split GGUFs "
            "are not supported (llama.cpp's `llama-gguf-split --merge` joins them)",
        ),
        (
            ["--lmstudio", "bartowski/Split-GGUF/split-Q8_0-00003-of-00003.gguf"],
            "split-Q8_0-00003-of-00003.gguf is part 3 of a GGUF split into 3 files",
        ),
        (
            ["--lmstudio", f"{LMSTUDIO_REPO}/mmproj-SmolLM2-f16.gguf"],
            "mmproj-SmolLM2-f16.gguf is a vision projector (mmproj), not a model",
        ),
        (
            ["--lmstudio", "bartowski/Two-GGUF/three.gguf"],
            "{lmstudio}/bartowski/Two-GGUF has no file three.gguf (GGUF files there: "
            "two-Q4_1.gguf, two-Q8_0.gguf)",
        ),
        (["--lmstudio", "nobody/Nothing"], "LM Studio has no model nobody/Nothing in {lmstudio}"),
        (["--lmstudio", "../x"], "'../x' is not an LM Studio model name"),
        (["some.gguf"], "--id is required when importing a .gguf file by path"),
        ([], "give one of: a .gguf path, --ollama NAME, --lmstudio PUBLISHER/REPO[/FILE]"),
        (["x.gguf", "--ollama", "smollm2", "--id", "x"], "give one of:"),
    ],
)
def test_import_errors_say_exactly_what_is_wrong(
    folders, settings, ollama_dir, lmstudio_dir, args, message
):
    message = message or missing_blob_message(ollama_dir)
    expected = message.format(ollama=ollama_dir, lmstudio=lmstudio_dir)
    with pytest.raises(CommandError) as raised:
        run(*args)
    assert expected in str(raised.value)
    assert not CatalogModel.objects.exists()
    assert not settings.MODEL_STORAGE_DIR.exists()


def test_broken_models_are_listed_with_their_problem(ollama_dir, lmstudio_dir):
    problems = {found.name: found.problem for found in list_ollama(ollama_dir)}
    assert problems["smollm2:latest"] == "" and problems["vision:latest"] == ""
    assert problems["missing-blob:latest"] == missing_blob_message(ollama_dir)
    assert problems["bad-manifest:latest"].startswith("the manifest ")
    assert problems["truncated:latest"].endswith(
        "bytes, its manifest says 98362433 (an interrupted download?)"
    )
    assert read_lmstudio(lmstudio_dir, LMSTUDIO_REPO) == lmstudio_dir / LMSTUDIO_FILE
    assert {found.slug for found in list_lmstudio(lmstudio_dir)} >= {"two-q4_1", "two-q8_0"}


# Each 2026 architecture the import knows, as Ollama keeps it (`ollama create` from a GGUF): a
# tiny random model of each, written as llama.cpp's converter writes it, through the same path.
MOE_AND_HYBRID = [
    ("qwen3moe", "tiny-moe:latest"),
    ("qwen3next", "tiny-hybrid:latest"),
    ("qwen35", "tiny-qwen35-dense:latest"),
    ("qwen35moe", "tiny-qwen35:latest"),
    ("gpt-oss-mxfp4", "tiny-gpt-oss:latest"),
    ("glm4moe", "tiny-glm4moe:latest"),
    ("deepseek2", "tiny-deepseek:latest"),
    ("granitehybrid-moe", "tiny-granite:latest"),
    ("nemotron_h_moe", "tiny-nemotron:latest"),
    ("lfm2", "tiny-lfm2:latest"),
    ("mistral3", "tiny-ministral:latest"),
    ("gemma4", "tiny-gemma4:latest"),
    ("llama4", "tiny-llama4:latest"),
    ("gemma3n", "tiny-gemma3n:latest"),  # on SmolLM2's first 2048 tokens
]


@pytest.mark.parametrize(("case_id", "name"), MOE_AND_HYBRID, ids=[c for c, _ in MOE_AND_HYBRID])
def test_moe_and_hybrid_models_import_from_ollama(case_id, name, db, settings, demo_gguf, tmp_path):
    import mlx.core as mx
    import numpy as np
    from mlx_lm import load

    from inference.conversion.gguf_file import read_metadata
    from tests.conversion.test_gguf_architectures import (
        CASES,
        COMMON,
        _parameters,
        build_model,
    )
    from tests.support.gguf_writer import write_gguf

    case = next(case for case in CASES if case.id == case_id)
    config = {**COMMON, **case.config}
    weights = {key: np.array(value) for key, value in _parameters(build_model(config, 0)).items()}
    tokenizer = {k: v for k, v in read_metadata(demo_gguf).items() if k.startswith("tokenizer.")}
    tokenizer = case.tokenizer(tokenizer)
    source = write_gguf(tmp_path / "model.gguf", case.arch, config, weights, tokenizer)
    models = tmp_path / "ollama"
    write_manifest(models, name, ollama_layers(models, source, template=SMOLLM_TEMPLATE), "F32")
    settings.OLLAMA_MODELS_DIR = models
    settings.LMSTUDIO_MODELS_DIR = tmp_path / "no-lmstudio"
    settings.MODEL_STORAGE_DIR = tmp_path / "converted"
    run("--ollama", name)
    entry = CatalogModel.objects.get(public_id=name.split(":")[0])
    assert entry.family.slug == "chatml"  # Ollama's template
    folder = Path(entry.location)
    assert json.loads((folder / "config.json").read_text())["model_type"] == config["model_type"]
    model, tokenizer_ = load(str(folder))
    logits = model(mx.array([tokenizer_.encode("Hello there")]))
    assert logits.shape[-1] == case.vocabulary and bool(mx.isfinite(logits).all())
