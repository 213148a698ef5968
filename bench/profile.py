"""Where one decode step's time goes, in-process, on the demo model as the server runs it.

    .venv/bin/python bench/profile.py [--batch 1,8,32] [--sampling greedy,top_p] [--steps 20]

For each batch size and sampling mode it fills a ModelRunner (the engine's batch) with that
many sequences, times whole decode steps, then times each part alone at the same shapes,
evaluated (MLX is lazy, so parts are measured apart, not inside the step): the model's layers,
the lm_head, sampling as the batch runs it (one vectorized call for every row), logits
processors (logit_bias), and the engine's per-token work (detokenizing, stop strings, events).
What the parts leave of the step is bookkeeping: Python between the parts, cache updates,
synchronisation. Then it times reading prompts (prefill) at a few lengths.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inference import blas

blas.preload()  # before MLX is imported, as the server's settings do

import mlx.core as mx  # noqa: E402

from inference.adapters import FamilyProfile, get_adapter  # noqa: E402
from inference.conversion.gguf import convert_gguf  # noqa: E402
from inference.engine.batching import ModelRunner  # noqa: E402
from inference.engine.config import EngineConfig  # noqa: E402
from inference.engine.pool import LoadedModel, ModelPool  # noqa: E402
from inference.engine.prefill import PrefillBatch  # noqa: E402
from inference.engine.sampling import make_processors, make_row_sampler, sample  # noqa: E402
from inference.engine.sequence import Sequence  # noqa: E402
from inference.engine.types import (  # noqa: E402
    GenerationJob,
    ModelSpec,
    SamplingParams,
    TokenPrompt,
)

ROOT = Path(__file__).resolve().parent.parent
PREFILLS = ((1, 64), (8, 64), (1, 512))
MODES = {
    "greedy": SamplingParams(temperature=0, max_tokens=4096, logit_bias={0: -100, 2: -100}),
    "top_p": SamplingParams(
        temperature=0.7, top_p=0.9, max_tokens=4096, logit_bias={0: -100, 2: -100}
    ),
}


def timed(run: Callable[[], object], repeats: int) -> float:
    """Median seconds of `run()` evaluated, after one warm-up call."""
    mx.eval(run())
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        mx.eval(run())
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def filled_runner(
    loaded: LoadedModel, batch: int, params: SamplingParams, stops: bool = True
) -> ModelRunner:
    """A runner with `batch` sequences, all past prefill and decoding; without `stops`, they
    end only at max_tokens (no stop ids: a banned end token would be a logits processor)."""
    runner = ModelRunner(loaded, EngineConfig(max_batch=max(batch, 1), prompt_cache_bytes=0))
    adapter = get_adapter(FamilyProfile(adapter="chatml"))
    stop_ids = adapter.stop_token_ids(loaded.tokenizer) if stops else frozenset()
    for i in range(batch):
        messages = [{"role": "user", "content": f"Tell me story number {i}."}]
        prompt = TokenPrompt(tuple(adapter.render_prompt(loaded.tokenizer, messages)))
        job = GenerationJob(loaded.spec, prompt, params, lambda event: None, stop_ids=stop_ids)
        runner.add(Sequence(job, loaded))
    while any(s.first_token_at is None for s in runner.sequences):
        runner.step()
    return runner


def step_seconds(runner: ModelRunner, steps: int) -> tuple[float, float]:
    """Median step time, and the share of it spent in Sequence.on_token (the engine's
    per-token Python: detokenizer, stop strings, events)."""
    spent = [0.0]
    original = Sequence.on_token

    def counted(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - started

    Sequence.on_token = counted
    try:
        times = []
        for _ in range(steps):
            started = time.perf_counter()
            runner.step()
            times.append(time.perf_counter() - started)
    finally:
        Sequence.on_token = original
    return statistics.median(times), spent[0] / steps


def part_seconds(loaded: LoadedModel, runner: ModelRunner, params: SamplingParams, steps: int):
    """The step's parts, alone, at the batch's shapes."""
    model = loaded.model
    batch = runner._decode
    cache = batch.cache
    tokens = mx.zeros((len(batch), 1), dtype=mx.uint32)
    hidden = model.model(tokens, cache=cache)
    head = model.lm_head if hasattr(model, "lm_head") else model.model.embed_tokens.as_linear
    logits = head(hidden)[:, -1, :]
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    mx.eval(logprobs)
    rows = len(batch)
    samplers = [make_row_sampler(params) for _ in range(rows)]
    processors = [make_processors(params) for _ in range(rows)]
    context = mx.zeros((1, 16), dtype=mx.uint32)

    def sample_batch():
        return mx.array(sample(logits, samplers, want_logprobs=False)[0])

    def process_per_row():
        out = []
        for i, chain in enumerate(processors):
            row = logits[i : i + 1]
            for process in chain:
                row = process(context, row)
            out.append(row)
        return mx.concatenate(out)

    return {
        "layers": timed(lambda: model.model(tokens, cache=cache), steps),
        "lm_head": timed(lambda: head(hidden), steps),
        "sampling": timed(sample_batch, steps),
        "processors": timed(process_per_row, steps),
    }


def profile(loaded: LoadedModel, batch: int, mode: str, steps: int) -> dict:
    params = MODES[mode]
    runner = filled_runner(loaded, batch, params)
    try:
        step, per_token = step_seconds(runner, steps)
        parts = part_seconds(loaded, runner, params, steps)
    finally:
        runner.close()
    parts["per-token Python"] = per_token
    parts["bookkeeping (rest)"] = max(0.0, step - sum(parts.values()))
    return {"step": step, "parts": parts, "tok_s": batch / step}


def prefill_seconds(loaded: LoadedModel, rows: int, length: int) -> float:
    """Seconds to read `rows` prompts of `length` tokens in one prefill step."""
    batch = PrefillBatch(loaded.model)
    params = SamplingParams(temperature=0)
    for _ in range(rows):
        job = GenerationJob(loaded.spec, TokenPrompt((1,)), params, lambda event: None)
        sequence = Sequence(job, loaded)
        batch.add(sequence, None, [1] * (length + 1))
    started = time.perf_counter()
    batch.step(rows * length)
    return time.perf_counter() - started


def load_demo(gguf: Path, workdir: Path) -> LoadedModel:
    converted = convert_gguf(gguf, workdir / "model").path
    pool = ModelPool(16 * 2**30)
    return pool.get(ModelSpec(model_id="demo", location=str(converted)))


def demo_parser(doc: str) -> argparse.ArgumentParser:
    """The in-process benchmarks' common arguments: the demo GGUF and the batch sizes."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument(
        "--gguf", type=Path, default=ROOT / "var/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    parser.add_argument("--batch", default="1,8,32")
    return parser


def report(batch: int, mode: str, result: dict) -> None:
    step = result["step"]
    print(f"\nbatch {batch:>3} {mode:<7} step {step * 1000:7.1f} ms  {result['tok_s']:6.1f} tok/s")
    for name, seconds in result["parts"].items():
        print(f"    {name:<20} {seconds * 1000:7.1f} ms  {seconds / step:6.1%}")


def main() -> None:
    parser = demo_parser(__doc__)
    parser.add_argument("--sampling", default="greedy,top_p", help=f"from {', '.join(MODES)}")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="profile-") as workdir:
        loaded = load_demo(args.gguf, Path(workdir))
        print(
            f"{loaded.spec.model_id}: computing in {loaded.compute_format}, "
            f"BLAS {blas.status().library or 'bundled'}, device {mx.default_device()}"
        )
        for batch in [int(b) for b in args.batch.split(",")]:
            for mode in args.sampling.split(","):
                report(batch, mode, profile(loaded, batch, mode, args.steps))
        print("\nprefill (one step, layers only)")
        for rows, length in PREFILLS:
            seconds = prefill_seconds(loaded, rows, length)
            print(
                f"    {rows:>2} x {length:>4} tokens  {seconds * 1000:7.0f} ms  "
                f"{rows * length / seconds:6.0f} tok/s"
            )


if __name__ == "__main__":
    main()
