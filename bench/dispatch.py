"""Dispatches per decode step: the demo model as the server runs it, with the fused llama
layers (inference/engine/cpu/fused.py) and without, per batch size.

    .venv/bin/python bench/dispatch.py [--batch 1,8,32] [--rounds 5] [--steps 16]

For each batch size: graph nodes of one step (mx.export_to_dot of the logits), Python graph
building against evaluation (the model called on the runner's cache, then mx.eval), and whole
engine steps (ModelRunner.step: model, sampling, per-token Python), the two ways alternated
step by step (the machine may be shared; medians). Then the weights read per second at one
stream, against the machine's copy bandwidth.
"""

from __future__ import annotations

import copy
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inference import blas

blas.preload()  # before MLX is imported, as the server's settings do

import mlx.core as mx  # noqa: E402

from bench.kernels import copy_bandwidth  # noqa: E402
from bench.profile import MODES, demo_parser, filled_runner, load_demo  # noqa: E402
from inference.engine import cpu  # noqa: E402

WAYS = {"fused": True, "per-op": False}


def graph_nodes(model, cache: list, batch: int) -> int:
    """Primitives in one step's graph, built on twins of the cache (left as they were)."""
    twins = [copy.copy(layer) for layer in cache]
    logits = model(mx.zeros((batch, 1), dtype=mx.uint32), cache=twins)[:, -1, :]
    with tempfile.NamedTemporaryFile("r", suffix=".dot") as dot:
        mx.export_to_dot(dot.name, logits)
        text = Path(dot.name).read_text()
    # Primitive nodes are drawn as rectangles, arrays as ovals.
    return len(re.findall(r"shape=rectangle|shape=box", text)) or text.count("->")


def build_and_eval(runners: dict, steps: int) -> dict[str, tuple[float, float]]:
    """Median seconds building one step's graph and evaluating it, per way, alternated step
    by step (each on its runner's cache, which it advances)."""
    times = {way: ([], []) for way in runners}
    for _ in range(steps):
        for way, runner in runners.items():
            cpu.use_fused(WAYS[way])
            cache = runner._decode.cache
            tokens = mx.zeros((len(cache[0].keys), 1), dtype=mx.uint32)
            started = time.perf_counter()
            logits = runner.loaded.model(tokens, cache=cache)[:, -1, :]
            built = time.perf_counter()
            mx.eval(logits)
            times[way][0].append(built - started)
            times[way][1].append(time.perf_counter() - built)
    cpu.use_fused(True)
    return {way: (statistics.median(b), statistics.median(e)) for way, (b, e) in times.items()}


def step_times(runners: dict, rounds: int, steps: int) -> dict[str, float]:
    """Median seconds of one engine step per way, the ways alternated step by step (the
    machine may be shared: both see the same moments of it)."""
    times: dict[str, list[float]] = {way: [] for way in runners}
    for _ in range(rounds * steps):
        for way, runner in runners.items():
            cpu.use_fused(WAYS[way])
            started = time.perf_counter()
            runner.step()
            times[way].append(time.perf_counter() - started)
    cpu.use_fused(True)
    return {way: statistics.median(t) for way, t in times.items()}


def measure(loaded, batch: int, rounds: int, steps: int) -> dict:
    runners = {way: filled_runner(loaded, batch, MODES["greedy"]) for way in WAYS}
    try:
        step = step_times(runners, rounds, steps)
        nodes = {}
        for way, runner in runners.items():
            cpu.use_fused(WAYS[way])
            nodes[way] = graph_nodes(loaded.model, runner._decode.cache, batch)
        parts = build_and_eval(runners, rounds * steps)
        return {
            way: {"step": step[way], "nodes": nodes[way], "build": b, "eval": e}
            for way, (b, e) in parts.items()
        }
    finally:
        cpu.use_fused(True)
        for runner in runners.values():
            runner.close()


def weight_bytes(model) -> int:
    layers = [m for _, m in model.named_modules() if isinstance(m, cpu.QuantizedKernelLayer)]
    return sum(m[k].nbytes for m in layers for k in ("weight", "scales", "biases"))


def main() -> None:
    parser = demo_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dispatch-") as workdir:
        loaded = load_demo(args.gguf, Path(workdir))
        print(f"demo model computing in {loaded.compute_format}; kernels {cpu.kernel_status()}")
        print(
            f"{'batch':>5} {'way':<7} {'nodes':>6} {'build ms':>9} {'eval ms':>8} "
            f"{'step ms':>8} {'tok/s':>7}"
        )
        ones = {}
        for batch in [int(b) for b in args.batch.split(",")]:
            result = measure(loaded, batch, args.rounds, args.steps)
            for way, r in result.items():
                print(
                    f"{batch:>5} {way:<7} {r['nodes']:>6} {r['build'] * 1e3:9.2f} "
                    f"{r['eval'] * 1e3:8.2f} {r['step'] * 1e3:8.2f} {batch / r['step']:7.1f}",
                    flush=True,
                )
            if batch == 1:
                ones = result
        if ones:
            size = weight_bytes(loaded.model)
            copy_gbs = copy_bandwidth()
            for way, r in ones.items():
                print(
                    f"one stream, {way}: {size / 2**20:.0f} MiB of weights per step at "
                    f"{size / r['step'] / 1e9:.1f} GB/s (whole step), "
                    f"{size / r['eval'] / 1e9:.1f} GB/s (evaluation); copy bandwidth "
                    f"{copy_gbs:.1f} GB/s read+write"
                )


if __name__ == "__main__":
    main()
