"""The matmul's integer paths (tiles, and direct: weights read as packed) against its float
path in whole decode steps, per batch size: the
demo model (4-bit, groups of 32, as its GGUF imports) and the same weights re-quantized to
8 bits, groups of 32, float16 scales (as a Q8_0 GGUF imports). What sets the kernels' row
thresholds (kernels/src/int8_vnni.cpp, int8_avx2.cpp).

    .venv/bin/python bench/int8_decode.py [--batch 1,2,3,4,6,8,12,16,24,32] [--rounds 5]
        [--bits 4,8] [--isa avx2]

Each step feeds every row one token over a 64-token float16 batch cache, model and lm_head
evaluated; the two paths alternate step by step (the machine may be shared; medians).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inference import blas

blas.preload()  # before MLX is imported, as the server's settings do

import cpu_kernels  # noqa: E402
import mlx.core as mx  # noqa: E402

from bench.profile import load_demo  # noqa: E402
from inference.engine import cpu  # noqa: E402
from inference.engine.cpu import layers as cpu_layers  # noqa: E402
from inference.engine.kv import Float16BatchKVCache  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PATHS = ("never", "always", "direct")


def requantize(model, bits: int, group: int) -> None:
    """Every kernel layer's weights at `bits` / `group`, float16 scales and biases."""
    for _, m in model.named_modules():
        if not isinstance(m, cpu.QuantizedKernelLayer):
            continue
        dense = mx.dequantize(m["weight"], m["scales"], m["biases"], m.group_size, m.bits)
        w, s, b = mx.quantize(dense.astype(mx.float32), group, bits)
        m.weight, m.scales, m.biases = w, s.astype(mx.float16), b.astype(mx.float16)
        m.group_size, m.bits = group, bits
    mx.eval(model.parameters())


def step_ms(model, batch: int, rounds: int, steps: int) -> dict[str, float]:
    layers = len(model.layers)
    cache = [Float16BatchKVCache([0] * batch) for _ in range(layers)]
    prompt = mx.random.randint(3, 1000, (batch, 64), key=mx.random.key(batch))
    mx.eval(model(prompt, cache=cache))
    tokens = mx.zeros((batch, 1), dtype=mx.uint32)
    times: dict[str, list[float]] = {path: [] for path in PATHS}
    for _ in range(rounds * steps):
        for path in PATHS:
            cpu_kernels.use_int8(path)
            started = time.perf_counter()
            mx.eval(model(tokens, cache=cache))
            times[path].append(time.perf_counter() - started)
    cpu_kernels.use_int8("auto")
    return {path: statistics.median(t) * 1e3 for path, t in times.items()}


def table(model, label: str, batches: list[int], rounds: int, steps: int) -> None:
    print(f"\n{label}: decode step ms (model + lm_head), float path vs the integer paths")
    head = ("batch", "float", "tiles", "direct", "tiles/float", "direct/float")
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, (5, 8, 8, 8, 11, 12), strict=True)))
    for batch in batches:
        ms = step_ms(model, batch, rounds, steps)
        tiles, direct = ms["always"] / ms["never"], ms["direct"] / ms["never"]
        print(
            f"{batch:>5} {ms['never']:8.2f} {ms['always']:8.2f} {ms['direct']:8.2f} "
            f"{tiles:11.2f} {direct:12.2f}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--gguf", type=Path, default=ROOT / "var/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    parser.add_argument("--batch", default="1,2,3,4,6,8,12,16,24,32")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--bits", default="4,8")
    parser.add_argument("--isa", default="", help="force the float kernels' set (avx2: AVX2's)")
    args = parser.parse_args()
    if args.isa and not cpu_kernels.use_isa(args.isa):
        raise SystemExit(f"this CPU lacks {args.isa}")
    batches = [int(b) for b in args.batch.split(",")]
    # MLX's layout: the float path reads only it (the x8 layout's paths: bench/real_width.py).
    with tempfile.TemporaryDirectory(prefix="int8-") as workdir, cpu_layers.mlx_layout():
        loaded = load_demo(args.gguf, Path(workdir))
    model = loaded.model
    print(f"integer path: {cpu_kernels.int8_isa()}; kernels {cpu.kernel_status().describe()}")
    for bits in [int(b) for b in args.bits.split(",")]:
        if bits != 4:
            requantize(model, bits, 32)
        table(model, f"{bits}-bit g32", batches, args.rounds, args.steps)


if __name__ == "__main__":
    main()
