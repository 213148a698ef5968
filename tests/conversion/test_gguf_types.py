"""Every GGUF tensor type, made by llama.cpp's own llama-quantize, imports to weights equal to
the gguf package's dequantization within what the MLX bits chosen allow; SmolLM2 re-quantized
to Q4_K_M answers like llama.cpp does on the same file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFWriter
from gguf import quants as gguf_quants

from inference.conversion.gguf import REPORT_FILE, convert_gguf
from inference.conversion.gguf_file import TensorInfo, open_gguf, read_metadata, read_rows
from inference.conversion.gguf_registry import ARCHITECTURES
from inference.engine import q6k
from tests.support.helpers import ROOT, SMALL_LLAMA, copy_gguf_tokenizer, write_small_llama
from tests.support.helpers import quantize_gguf as quantize

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

HIDDEN, FFN, LAYERS, VOCAB = SMALL_LLAMA  # rows of 256: every K-quant applies
# llama-quantize type -> what each 2-D tensor holds with --pure
PURE_TYPES = {
    "F16": "F16",
    "BF16": "BF16",
    "Q4_0": "Q4_0",
    "Q4_1": "Q4_1",
    "Q5_0": "Q5_0",
    "Q5_1": "Q5_1",
    "Q8_0": "Q8_0",
    "Q2_K": "Q2_K",
    "Q3_K_S": "Q3_K",
    "Q4_K_S": "Q4_K",
    "Q5_K_S": "Q5_K",
    "Q6_K": "Q6_K",
    "IQ4_NL": "IQ4_NL",
    "IQ4_XS": "IQ4_XS",
}
# Mean |MLX - gguf dequantized| over mean |w|: exact repacks only round scales to float16;
# a re-quantization adds at most half a step of its own grid.
TOLERANCE = {"exact": 2e-3, 4: 0.12, 8: 0.01}
MEAN_ERRORS: dict[str, float] = {}


@pytest.fixture(scope="module")
def small_f32(tmp_path_factory, demo_gguf: Path) -> Path:
    return write_small_llama(tmp_path_factory.mktemp("small") / "small-f32.gguf", demo_gguf)


def _imported_weight(folder: Path, arrays: dict, mlx_name: str, bits: int | None) -> np.ndarray:
    import mlx.core as mx

    if bits is None:
        return np.array(arrays[mlx_name].astype(mx.float32))
    module = mlx_name.removesuffix(".weight")
    if bits == 6:  # Q6_K, kept in the CPU kernels' layout
        parts = (arrays[f"{module}.{k}"] for k in ("weight", "scales", "biases"))
        return np.array(q6k.dequantize(*parts))
    scales, biases = (arrays[f"{module}.{k}"].astype(mx.float32) for k in ("scales", "biases"))
    restored = mx.dequantize(arrays[mlx_name], scales, biases, group_size=32, bits=bits)
    return np.array(restored)


def _gguf_values(path: Path, tensor: TensorInfo) -> np.ndarray:
    """gguf-py's own dequantization of the tensor's bytes: the reference. The header is read by
    open_gguf, as GGUFReader spends ~3 s on the 49k-token vocabulary these files carry."""
    raw = np.concatenate(list(read_rows(path, tensor)))
    values = gguf_quants.dequantize(raw, GGMLQuantizationType[tensor.type_name])
    return values.astype(np.float32).reshape(tensor.shape)


@pytest.mark.parametrize("kind", list(PURE_TYPES))
def test_each_tensor_type_imports_to_its_dequantized_values(
    kind: str, small_f32: Path, llama_tools: Path, tmp_path: Path
):
    import mlx.core as mx

    source = quantize(llama_tools, small_f32, tmp_path / f"small-{kind}.gguf", kind, "--pure")
    converted = convert_gguf(source, tmp_path / "out")
    arrays = mx.load(str(converted.path / "model.safetensors"))
    config = json.loads((converted.path / "config.json").read_text())
    quantization = config.get("quantization", {})
    arch = ARCHITECTURES["llama"]
    stored = PURE_TYPES[kind]
    checked, abs_error, abs_weight = 0, 0.0, 0.0
    for tensor in open_gguf(source).tensors:
        if tensor.type_name != stored or len(tensor.shape) != 2:
            continue
        name = arch.mlx_name(tensor.name)
        bits = quantization.get(name.removesuffix(".weight"), {}).get("bits")
        expected = _gguf_values(source, tensor)
        actual = _imported_weight(converted.path, arrays, name, bits)
        assert actual.shape == expected.shape, tensor.name
        abs_error += float(np.abs(actual - expected).sum())
        abs_weight += float(np.abs(expected).sum())
        checked += 1
    assert checked >= 2 * 7, f"only {checked} {stored} tensors in the {kind} file"
    report = converted.report["types"][stored]
    mean_error = abs_error / abs_weight
    MEAN_ERRORS[stored] = mean_error
    print(f"{stored}: became {report['became']}, mean relative error {mean_error:.2e}")
    assert report["mean_relative_error"] == pytest.approx(mean_error, rel=0.05, abs=1e-7)
    if stored in ("F16", "BF16"):
        assert report["became"] == stored.lower().replace("bf", "bfloat").replace("f16", "float16")
        assert mean_error == 0.0
    elif report["exact"]:
        assert mean_error < TOLERANCE["exact"]
    else:
        bits = int(report["became"].split("-")[0])
        assert bits >= 4 and mean_error < TOLERANCE[bits]
    assert (converted.path / REPORT_FILE).is_file()


@pytest.mark.parametrize("kind", ["Q4_K_M", "Q5_K_M", "Q3_K_S"])
def test_mixed_k_quant_files_import(kind: str, small_f32: Path, llama_tools: Path, tmp_path):
    """llama-quantize's mixtures (Q6_K for some tensors beside Q4_K...) as people download them."""
    source = quantize(llama_tools, small_f32, tmp_path / f"small-{kind}.gguf", kind)
    converted = convert_gguf(source, tmp_path / "out")
    types = converted.report["types"]
    assert len(types) >= 2, types
    for stored, entry in types.items():
        bound = TOLERANCE["exact"] if entry["exact"] else 0.12
        assert entry["mean_relative_error"] < bound, (stored, entry)


def test_keep_float_dequantizes_everything(small_f32: Path, llama_tools: Path, tmp_path: Path):
    import mlx.core as mx

    source = quantize(llama_tools, small_f32, tmp_path / "q4km.gguf", "Q4_K_M")
    converted = convert_gguf(source, tmp_path / "out", weights="float16")
    config = json.loads((converted.path / "config.json").read_text())
    assert "quantization" not in config
    arrays = mx.load(str(converted.path / "model.safetensors"))
    assert arrays["model.layers.0.mlp.down_proj.weight"].dtype == mx.float16
    assert not any(name.endswith(".scales") for name in arrays)


# --- SmolLM2 as a user has it: Q4_K_M from llama-quantize -----------------------------------

PASSAGE = (
    "The history of astronomy is the story of how people came to understand the sky. Ancient "
    "observers in Babylon recorded the motions of the planets on clay tablets, and Greek "
    "thinkers such as Aristarchus and Ptolemy proposed models of the heavens. For more than a "
    "thousand years the Earth was placed at the centre of the universe. In 1543 Nicolaus "
    "Copernicus published a book arguing that the Sun, not the Earth, sat at the centre, and "
    "Johannes Kepler later showed that planets travel in ellipses. Galileo Galilei turned a "
    "telescope to the sky in 1609 and saw the moons of Jupiter, the phases of Venus and the "
    "craters of the Moon. Isaac Newton explained why the planets move as they do with his law "
    "of universal gravitation. In the nineteenth century spectroscopy allowed astronomers to "
    "learn what stars are made of, and photography made it possible to record faint objects. "
    "The twentieth century brought radio telescopes, the discovery that the universe is "
    "expanding, and the first spacecraft to visit other planets. Today astronomers use "
    "telescopes in space, such as Hubble and James Webb, to look back to the first galaxies. "
    "They have found thousands of planets around other stars, measured gravitational waves "
    "from colliding black holes, and mapped the cosmic microwave background left over from the "
    "Big Bang. Each discovery has raised new questions: what is dark matter, what drives the "
    "acceleration of the expansion, and is there life elsewhere? Students who learn astronomy "
    "today study physics, mathematics and computing, and many of them work in large "
    "international teams. Amateur astronomers still make real contributions, finding comets, "
    "watching variable stars and following asteroids. The sky that once guided farmers and "
    "sailors now guides our understanding of where we come from. Cooking is another old human "
    "art. Bread was baked in Egypt thousands of years ago, and every culture has its own way "
    "of preparing grains, vegetables and meat. A good cook learns to balance salt, acid, fat "
    "and heat, and to taste the food while it cooks. Markets, kitchens and family tables have "
    "carried recipes from one generation to the next, and today people share them with the "
    "whole world in a few seconds. Music, too, is found in every culture: drums, flutes and "
    "voices accompanied work, worship and celebration long before anyone wrote notes down. "
    "Rivers shaped where the first cities grew: the Nile, the Tigris and Euphrates, the Indus "
    "and the Yellow River gave water for fields and roads for boats. Writing began as a way to "
    "count grain and sheep, and only later recorded laws, letters, poems and prayers. Paper, "
    "printing and finally computers each changed who could read and what could be kept."
)


@pytest.fixture(scope="module")
def smollm_q4km(demo_gguf: Path, llama_tools: Path, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("q4km")
    return quantize(
        llama_tools, demo_gguf, folder / "smollm2-q4km.gguf", "Q4_K_M", "--allow-requantize"
    )


@pytest.fixture(scope="module")
def smollm_q4km_dir(smollm_q4km: Path) -> Path:
    return convert_gguf(smollm_q4km, smollm_q4km.parent / "imported").path


def test_smollm_q4_k_m_answers_paris(smollm_q4km_dir: Path):
    from mlx_lm import generate

    model, tokenizer = q6k.load(smollm_q4km_dir)
    # Q4_1 re-quantized to Q4_K_M is a lossy copy of a lossy copy: llama.cpp on this file
    # rambles about "L'Étoile" when asked "What is the capital...?" as the import does.
    messages = [{"role": "user", "content": "Name the capital of France."}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    answer = generate(model, tokenizer, prompt, max_tokens=24)
    assert "Paris" in answer


def _in_float32(model):
    """The model with its quantized layers replaced by float32 ones holding exactly the values
    the quantized matmul computes with: the same arithmetic through BLAS, not MLX's slow CPU
    path for 5-bit weights (Q5_0 is most of this file)."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_unflatten

    swaps = []
    for name, module in model.named_modules():
        if isinstance(module, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
            scales, biases = module.scales.astype(mx.float32), module.biases.astype(mx.float32)
            weight = mx.dequantize(module.weight, scales, biases, module.group_size, module.bits)
            if isinstance(module, nn.QuantizedEmbedding):
                dense = nn.Embedding(*weight.shape)
            else:
                dense = nn.Linear(weight.shape[1], weight.shape[0], bias="bias" in module)
            dense.update({"weight": weight} | ({"bias": module.bias} if "bias" in module else {}))
            swaps.append((name, dense))
    model.update_modules(tree_unflatten(swaps))
    return model


def _top1(folder: Path, ids: list[int]) -> np.ndarray:
    import mlx.core as mx

    model = _in_float32(q6k.load(folder)[0])
    return np.array(model(mx.array([ids]))[0].argmax(axis=-1))


def test_smollm_q4_k_m_top1_agrees_with_llama_cpp(
    smollm_q4km: Path, smollm_q4km_dir: Path, llama_tools: Path
):
    """llama.cpp rounds activations to 8 bits for its quantized dot products; the import
    computes in float32. The exact dequantization of the same file ("keep float") is the
    control: it must agree with llama.cpp as often as the quantized import does, and the
    quantized import must agree with it almost everywhere."""
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(smollm_q4km_dir).encode(PASSAGE)[:500]
    assert len(ids) == 500
    reference = subprocess.run(
        [str(llama_tools / "llama-reference"), str(smollm_q4km), "0", *map(str, ids)],
        check=True,
        capture_output=True,
        text=True,
    )
    theirs = np.array(json.loads(reference.stdout)["argmax"])
    ours = _top1(smollm_q4km_dir, ids)
    control_dir = convert_gguf(smollm_q4km, smollm_q4km.parent / "f32", weights="float32").path
    control = _top1(control_dir, ids)
    agreement, control_agreement = float((ours == theirs).mean()), float((control == theirs).mean())
    print(
        f"top-1 agreement with llama.cpp over 500 tokens: Q4_K_M import {agreement:.3f}, "
        f"float32 import {control_agreement:.3f}; import vs float32 {(ours == control).mean():.3f}"
    )
    assert (ours == control).mean() >= 0.99
    assert agreement >= min(0.98, control_agreement - 0.004)


# --- memory and interruption ----------------------------------------------------------------

MEASURE = """
import json, sys
from pathlib import Path
from inference.conversion.gguf import convert_gguf

def rss(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024

import mlx.core, tokenizers, gguf  # noqa: F401  (the importer's own baseline)
before = rss("VmRSS:")
convert_gguf(Path(sys.argv[1]), Path(sys.argv[2]))
print(json.dumps({"before": before, "peak": rss("VmHWM:")}))
"""


def test_peak_memory_stays_near_one_tensor_plus_the_output(smollm_q4km: Path, tmp_path: Path):
    out = tmp_path / "measured"
    result = subprocess.run(
        [sys.executable, "-c", MEASURE, str(smollm_q4km), str(out)],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    largest = max(t.n_bytes for t in open_gguf(smollm_q4km).tensors)
    output = (out / "model.safetensors").stat().st_size
    growth, bound = measured["peak"] - measured["before"], 2 * largest + output
    print(f"import grew RSS by {growth / 2**20:.0f} MiB; bound {bound / 2**20:.0f} MiB")
    assert growth < bound


def test_killed_import_leaves_nothing_behind(smollm_q4km: Path, tmp_path: Path):
    """Ctrl-C mid-conversion cleans up at once; a SIGKILL leaves a staging folder that the
    next import into the same place removes."""
    models = tmp_path / "models"
    # Ctrl-C's default handler, even where the suite runs as a background job (which starts
    # children with SIGINT ignored).
    code = "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    code += "from pathlib import Path; from inference.conversion.gguf import convert_gguf; "
    code += "convert_gguf(Path(sys.argv[1]), Path(sys.argv[2]))"
    for sig in (signal.SIGINT, signal.SIGKILL):
        process = subprocess.Popen(
            [sys.executable, "-c", code, str(smollm_q4km), str(models / "smol")],
            cwd=ROOT,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while not any(models.glob(".*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # into the tensors
        os.kill(process.pid, sig)
        process.wait(timeout=60)
        assert not (models / "smol").exists()
    leftovers = list(models.iterdir())
    assert len(leftovers) == 1 and leftovers[0].name.startswith(".")  # what SIGKILL left
    convert_gguf(smollm_q4km, models / "other")
    assert [p.name for p in models.iterdir()] == ["other"]


def test_refusals_name_what_is_supported(tmp_path: Path, demo_gguf: Path):
    from inference.conversion.gguf import UnsupportedGGUF, inspect_gguf

    path = tmp_path / "q8k.gguf"
    writer = GGUFWriter(str(path), "llama")
    copy_gguf_tokenizer(writer, demo_gguf)
    writer.add_tensor(
        "token_embd.weight", np.zeros((4, 292), np.uint8), raw_dtype=GGMLQuantizationType.Q8_K
    )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UnsupportedGGUF, match=r"tensor types Q8_K are not supported.*Q4_K"):
        inspect_gguf(path)
    assert read_metadata(path)["tokenizer.ggml.model"] == "gpt2"


def test_listing_finds_the_type_llama_quantize_wrote(smollm_q4km: Path):
    """llama-quantize writes general.file_type after the vocabulary, as real downloads have it."""
    from catalog.gguf_header import quantization_from_header

    assert quantization_from_header(smollm_q4km) == "Q4_K_M"
