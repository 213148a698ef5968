"""Pipelined decode against step-by-step decode, in-process, on the demo model.

    .venv/bin/python bench/pipeline.py [--batch 1,8,32] [--rounds 12] [--steps 16]

With decode.PIPELINE on, a plain step (no drafts, processors or log probabilities) is handed
to the device before the step before it is read, so the next graph is built, and the last
tokens delivered, while the device computes. For each batch size and sampling mode this fills
a ModelRunner with sequences that never stop (no stop ids, no banned tokens: a banned token
is a processor, which turns pipelining off) and times whole engine steps (ModelRunner.step:
the model, sampling, detokenizing, events), the two ways alternated in blocks of `--steps`
steps so that the machine's drift touches both alike. Reported: medians of a block's
milliseconds per step, and pipelined over step-by-step.
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

from bench.profile import demo_parser, filled_runner, load_demo  # noqa: E402
from inference.engine import decode  # noqa: E402
from inference.engine.batching import ModelRunner  # noqa: E402
from inference.engine.pool import LoadedModel  # noqa: E402
from inference.engine.types import SamplingParams  # noqa: E402

MODES = {
    "greedy": SamplingParams(temperature=0, max_tokens=100_000),
    "top_p": SamplingParams(temperature=0.7, top_p=0.9, max_tokens=100_000),
}


def block_ms(runner: ModelRunner, pipelined: bool, steps: int) -> float:
    """Milliseconds per step over `steps` steps, the first of the block not counted (it
    switches ways: a pipelined block's first step reads nothing)."""
    decode.PIPELINE = pipelined
    runner.step()
    started = time.perf_counter()
    for _ in range(steps):
        runner.step()
    return (time.perf_counter() - started) / steps * 1000


def measure(loaded: LoadedModel, batch: int, params: SamplingParams, rounds: int, steps: int):
    runner = filled_runner(loaded, batch, params, stops=False)
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(rounds):
        for way in (True, False):
            times[way].append(block_ms(runner, way, steps))
    runner.close()
    return statistics.median(times[True]), statistics.median(times[False])


def main() -> None:
    parser = demo_parser(__doc__)
    parser.add_argument("--sampling", default="greedy,top_p", help=f"from {', '.join(MODES)}")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pipeline-") as workdir:
        loaded = load_demo(args.gguf, Path(workdir))
        print(f"{loaded.spec.model_id}: computing in {loaded.compute_format}")
        print(f"{'batch':>5} {'sampling':<8} {'pipelined':>10} {'stepwise':>10} {'ratio':>6}")
        for batch in map(int, args.batch.split(",")):
            for mode in args.sampling.split(","):
                on, off = measure(loaded, batch, MODES[mode], args.rounds, args.steps)
                print(f"{batch:>5} {mode:<8} {on:8.2f}ms {off:8.2f}ms {on / off:6.3f}")


if __name__ == "__main__":
    main()
