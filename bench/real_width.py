"""Decode at real widths, in-process: random-weight models of the shapes people run (weights'
values do not change the cost), quantized 4-bit in groups of 32 as a Q4_K import stores them,
with the CPU kernels swapped in as the engine swaps them. Per shape and weight layout (MLX's,
and the kernels' x8 where the CPU has AVX-512 VNNI: eight columns interleaved), on the direct
integer path: every quantized product of one decode step streamed from memory (at 1 row, and at
--rows more, as a batch of streams), and greedy decoding through mlx-lm's own loop (graph
building overlapped with evaluation), each beside the machine's copy bandwidth.

    .venv/bin/python bench/real_width.py [--shapes qwen3-1.7b,llama-3.2-1b] [--tokens 48]
        [--rounds 3] [--rows 8]

Models are built once into var/bench/real-width/<shape>/ (about a minute and 1 GB each).
Rounds alternate the paths, and each figure is the median over rounds: on a shared VM one run
of the same code varies by +-15%. What is left out: llama-server on the same weights (it needs
the shape as a GGUF: convert a random HF checkpoint with llama.cpp's convert_hf_to_gguf.py),
Q6_K tensors (stored 8-bit here), batches, prompts.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from inference import blas  # noqa: E402

blas.preload()  # before MLX is imported, as the server's settings do

import cpu_kernels as ck  # noqa: E402
import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402
from mlx_lm.generate import generate_step  # noqa: E402
from mlx_lm.models import llama, qwen3  # noqa: E402
from mlx_lm.utils import load_model, save_config, save_model  # noqa: E402

from bench.kernels import copy_bandwidth  # noqa: E402
from inference.engine import cpu  # noqa: E402
from inference.engine.cpu import layers as cpu_layers  # noqa: E402

SHAPES = {
    "qwen3-1.7b": (qwen3, dict(model_type="qwen3", hidden_size=2048, num_hidden_layers=28,
                               intermediate_size=6144, num_attention_heads=16,
                               num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                               vocab_size=151936, max_position_embeddings=40960,
                               rope_theta=1e6, tie_word_embeddings=True)),
    "llama-3.2-1b": (llama, dict(model_type="llama", hidden_size=2048, num_hidden_layers=16,
                                 intermediate_size=8192, num_attention_heads=32,
                                 num_key_value_heads=8, head_dim=64, rms_norm_eps=1e-5,
                                 vocab_size=128256, rope_theta=500000.0,
                                 tie_word_embeddings=True)),
}  # fmt: skip
LAYOUTS = ("mlx", "x8")


def built(name: str) -> Path:
    """The shape's 4-bit model directory, made on first use."""
    folder = ROOT / "var" / "bench" / "real-width" / name
    if (folder / "config.json").exists():
        return folder
    module, config = SHAPES[name]
    print(f"building {name} (random weights, 4-bit g32) in {folder}", flush=True)
    model = module.Model(module.ModelArgs.from_dict(config))
    nn.quantize(model, group_size=32, bits=4)
    mx.eval(model.parameters())
    folder.mkdir(parents=True, exist_ok=True)
    save_model(folder, model)
    save_config({**config, "quantization": {"group_size": 32, "bits": 4}}, folder / "config.json")
    return folder


def products_seconds(model: nn.Module, rows: int) -> tuple[float, int]:
    """One decode step's quantized products (`rows` streams) in one evaluation, and their
    bytes."""
    layers = [m for _, m in model.named_modules() if isinstance(m, cpu.QuantizedKernelLayer)]
    x = {k: mx.random.normal((rows, k)) for k in {cpu_layers.in_features(m) for m in layers}}

    def product(m: nn.Module) -> mx.array:
        return ck.quantized_matmul(
            x[cpu_layers.in_features(m)],
            m["weight"],
            m["scales"],
            m["biases"],
            m.group_size,
            m.bits,
        )

    def step():
        return [product(m) for m in layers]

    mx.eval(step())
    times = []
    for _ in range(5):
        outputs = step()
        started = time.perf_counter()
        mx.eval(outputs)
        times.append(time.perf_counter() - started)
    nbytes = sum(m[k].nbytes for m in layers for k in ("weight", "scales", "biases"))
    return statistics.median(times), nbytes


def decode_seconds(model: nn.Module, tokens: int) -> float:
    """Seconds per greedy token through mlx-lm's loop, after 8 warm-up tokens."""
    prompt = mx.array(list(range(1, 17)))
    started = None
    for i, _ in enumerate(generate_step(prompt, model, max_tokens=tokens + 8)):
        if i == 7:
            started = time.perf_counter()
    return (time.perf_counter() - started) / tokens


def as_imported(model: nn.Module) -> None:
    """Scales and biases in float16, as `manage.py import_gguf` stores a Q4_K's (the models
    here are quantized from float32, whose scales would read twice the bytes)."""
    for _, m in model.named_modules():
        if isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
            m.scales = m.scales.astype(mx.float16)
            m.biases = m.biases.astype(mx.float16)
    mx.eval(model.parameters())


def loaded(name: str, layout: str) -> nn.Module:
    """The shape's model with the kernels swapped in, its linears in `layout` (x8: as the
    engine lays them out where the CPU reads it; mlx: kept as MLX packs them)."""
    model, _ = load_model(built(name))
    as_imported(model)
    if layout == "mlx":
        with cpu_layers.mlx_layout():
            cpu.accelerate(model)
    else:
        cpu.accelerate(model)
    return model


def measure(name: str, tokens: int, rounds: int, rows: int, copy_gbs: float) -> None:
    layouts = LAYOUTS if ck.x8_isa() != "none" else LAYOUTS[:1]
    models = {layout: loaded(name, layout) for layout in layouts}
    total = sum(v.nbytes for _, v in tree_flatten(models["mlx"].parameters()))
    print(f"\n{name}: {total / 2**20:.0f} MiB of weights")
    figures: dict[str, dict[str, list[float]]] = {
        layout: {"products": [], "batch": [], "token": []} for layout in layouts
    }
    nbytes = 0
    for _ in range(rounds):
        for layout, model in models.items():
            seconds, nbytes = products_seconds(model, 1)
            figures[layout]["products"].append(seconds)
            figures[layout]["batch"].append(products_seconds(model, rows)[0])
            figures[layout]["token"].append(decode_seconds(model, tokens))
    header = f"{'layout':<8} {'products ms':>12} {'GB/s':>6} {'of copy':>8}"
    print(f"{header} {f'{rows} rows ms':>11} {'ms/token':>9} {'tok/s':>6}")
    for layout, got in figures.items():
        products, token = statistics.median(got["products"]), statistics.median(got["token"])
        rate = nbytes / products / 1e9
        print(
            f"{layout:<8} {products * 1e3:12.1f} {rate:6.1f} {rate / copy_gbs:8.2f} "
            f"{statistics.median(got['batch']) * 1e3:11.1f} {token * 1e3:9.1f} {1 / token:6.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=8)
    args = parser.parse_args()
    status = cpu.kernel_status()
    if not status.available:
        raise SystemExit(f"the CPU kernels are off: {status.reason}")
    copy_gbs = copy_bandwidth()
    print(f"CPU kernels: {status.describe()}; copy bandwidth {copy_gbs:.1f} GB/s (read+write)")
    for name in args.shapes.split(","):
        measure(name, args.tokens, args.rounds, args.rows, copy_gbs)


if __name__ == "__main__":
    main()
