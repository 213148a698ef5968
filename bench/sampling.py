"""Milliseconds per sampling call (sampling.sample, a whole decode batch), the CPU kernel
(cpu_kernels.sample_rows) against MLX's path (argpartition over the vocabulary), in one process.

    .venv/bin/python bench/sampling.py [--batch 1,8,32] [--modes top_p,top_k,min_p,plain]
                                       [--repeats 40] [--synthetic]

The logits are the demo model's next-token logits in the middle of short stories (a trained
model's nucleus, not a random one), one story per row, or with --synthetic normal * 3 over
the demo vocabulary. Each repeat times a block of calls of each path back to back,
alternating which goes first (a block, not one call: a call right after the other path's
ran slower, its caches and threads cold, for both paths); the table gives the medians of
all calls.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inference import blas

blas.preload()  # before MLX is imported, as the server's settings do

import mlx.core as mx  # noqa: E402

from bench.profile import demo_parser  # noqa: E402
from inference.conversion.gguf import convert_gguf  # noqa: E402
from inference.engine import sampling  # noqa: E402
from inference.engine.cpu import kernel_status  # noqa: E402
from inference.engine.pool import ModelPool  # noqa: E402
from inference.engine.types import ModelSpec, SamplingParams  # noqa: E402

BLOCK = 5  # calls of one path in a row
MODES = {
    "top_p": SamplingParams(temperature=0.7, top_p=0.9),
    "top_k": SamplingParams(temperature=0.7, top_k=40),
    "min_p": SamplingParams(temperature=0.7, min_p=0.05),
    "all": SamplingParams(temperature=0.8, top_p=0.95, top_k=40, min_p=0.02),
    "plain": SamplingParams(temperature=0.7),
}
OPENINGS = (
    "Once upon a time, in a small village by the sea, there lived",
    "The old lighthouse keeper looked at the storm and",
    "In the year 2150, the first colony on Mars",
    "She opened the letter slowly, and her hands",
    "The recipe calls for two cups of flour, a pinch of salt and",
    "Deep in the forest, the fox and the crow",
    "When the train stopped in the middle of nowhere, the passengers",
    "The scientist checked the readings twice, because",
)


def story_logits(gguf: Path, rows: int) -> mx.array:
    """The demo model's logits after `rows` story openings (with a number, so rows differ)."""
    with tempfile.TemporaryDirectory(prefix="sampling-") as workdir:
        converted = convert_gguf(gguf, Path(workdir) / "model").path
        loaded = ModelPool(16 * 2**30).get(ModelSpec(model_id="demo", location=str(converted)))
        out = []
        for i in range(rows):
            text = f"Story {i + 1}. {OPENINGS[i % len(OPENINGS)]}"
            tokens = mx.array(loaded.tokenizer.encode(text))[None, :]
            out.append(loaded.model(tokens)[:, -1, :].astype(mx.float32))
        logits = mx.concatenate(out, axis=0)
        mx.eval(logits)
        return logits


def seconds(logits: mx.array, rows: list, kernel: bool) -> float:
    sampling.USE_KERNEL = kernel
    started = time.perf_counter()
    sampling.sample(logits, rows, want_logprobs=False)
    return time.perf_counter() - started


def compare(logits: mx.array, params: SamplingParams, repeats: int) -> tuple[float, float]:
    """Median seconds per call of MLX's path and of the kernel, interleaved."""
    rows = [sampling.make_row_sampler(params) for _ in range(logits.shape[0])]
    times: dict[bool, list[float]] = {False: [], True: []}
    for kernel in (False, True):  # warm-up: compiled exp, first allocations
        seconds(logits, rows, kernel)
    for r in range(repeats):
        for kernel in (r % 2 == 0, r % 2 == 1):
            times[kernel].extend(seconds(logits, rows, kernel) for _ in range(BLOCK))
    sampling.USE_KERNEL = True
    return statistics.median(times[False]), statistics.median(times[True])


def main() -> None:
    parser = demo_parser(__doc__)
    parser.add_argument("--modes", default="top_p", help=f"from {', '.join(MODES)}")
    parser.add_argument("--repeats", type=int, default=10, help=f"blocks of {BLOCK} calls")
    parser.add_argument("--synthetic", action="store_true")
    args = parser.parse_args()
    status = kernel_status()
    if not status.available:
        raise SystemExit(f"the CPU kernels are off here: {status.reason}")
    batches = [int(b) for b in args.batch.split(",")]
    if args.synthetic:
        logits = mx.random.normal((max(batches), 49152), key=mx.random.key(0)) * 3
        source = "synthetic normal * 3"
    else:
        logits = story_logits(args.gguf, max(batches))
        source = "demo model, mid-story"
    print(f"logits: {source}, vocabulary {logits.shape[1]}; kernels {status.describe()}")
    print(f"{'batch':>5}  {'mode':<6} {'MLX ms':>8} {'kernel ms':>10} {'speed-up':>9}")
    for batch in batches:
        for mode in args.modes.split(","):
            mlx_s, kernel_s = compare(logits[:batch], MODES[mode], args.repeats)
            print(
                f"{batch:>5}  {mode:<6} {mlx_s * 1000:8.2f} {kernel_s * 1000:10.2f} "
                f"{mlx_s / kernel_s:8.1f}x"
            )


if __name__ == "__main__":
    main()
