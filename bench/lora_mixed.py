"""A decode batch of a base model and two LoRA adapters of it, against the base alone.

    .venv/bin/python bench/lora_mixed.py [--batch 12] [--rank 8] [--rounds 8] [--steps 16]

In-process, on the demo model as the server runs it (the CPU kernels, fused llama blocks), with
two random-weight adapters of rank `--rank` on every layer's q and v projections (what
mlx-lm's trainer saves). Runners of `--batch` rows each, decoding without end (greedy,
no stops: pipelined as the server's plain batches are): the base's rows alone; a third of the
rows each the base's and the two adapters', with the adapters' terms grouped by adapter
(engine/lora.py MODE "grouped": gathered rows, two matmuls, added back); the same mixed batch
with every adapter's matrices stacked and each row's picked by mx.gather_mm ("stacked");
and the base's rows alone with the fused blocks off ("per-op": what an adapted block costs
without its low-rank terms, since it leaves the fused path while an adapter row is in).
Whole engine steps (ModelRunner.step) are timed in blocks of `--steps`, the three ways
alternated `--rounds` times so that the machine's drift touches them alike; medians of
tokens/s, and each mixed way over the base alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inference import blas

blas.preload()  # before MLX is imported, as the server's settings do

import mlx.core as mx  # noqa: E402

from inference.conversion.gguf import convert_gguf  # noqa: E402
from inference.engine import lora  # noqa: E402
from inference.engine.batching import ModelRunner  # noqa: E402
from inference.engine.config import EngineConfig  # noqa: E402
from inference.engine.cpu import fused  # noqa: E402
from inference.engine.pool import LoadedModel, ModelPool  # noqa: E402
from inference.engine.sequence import Sequence  # noqa: E402
from inference.engine.types import GenerationJob, ModelSpec, SamplingParams, TokenPrompt  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ENDLESS = SamplingParams(temperature=0, max_tokens=100_000)


def random_adapter(base: LoadedModel, folder: Path, rank: int, seed: int) -> Path:
    """An adapter of `rank` on every layer's q_proj and v_proj, random A and B."""
    mx.random.seed(seed)
    weights = {}
    for i, layer in enumerate(base.model.layers):
        for name in ("q_proj", "v_proj"):
            linear = getattr(layer.self_attn, name)
            out = linear(mx.zeros((1, base.config["hidden_size"]))).shape[-1]
            path = f"model.layers.{i}.self_attn.{name}"
            weights[f"{path}.lora_a"] = mx.random.normal((base.config["hidden_size"], rank)) * 0.02
            weights[f"{path}.lora_b"] = mx.random.normal((rank, out)) * 0.02
    folder.mkdir(parents=True)
    mx.save_safetensors(str(folder / lora.WEIGHTS), weights)
    parameters = {"rank": rank, "scale": 2.0, "dropout": 0.0}
    config = {"fine_tune_type": "lora", "num_layers": len(base.model.layers)}
    (folder / lora.CONFIG).write_text(json.dumps({**config, "lora_parameters": parameters}))
    return folder


def filled(base: LoadedModel, models: list[LoadedModel], batch: int) -> ModelRunner:
    """The base's runner with `batch` rows past their prompts, row i of models[i % n]."""
    runner = ModelRunner(base, EngineConfig(max_batch=batch, prompt_cache_bytes=0))
    for i in range(batch):
        model = models[i % len(models)]
        ids = base.tokenizer.encode(f"Tell me story number {i}, a long one.")
        job = GenerationJob(model.spec, TokenPrompt(tuple(ids)), ENDLESS, lambda event: None)
        runner.add(Sequence(job, model))
    while any(s.first_token_at is None for s in runner.sequences):
        runner.step()
    return runner


def block_tokens_per_second(runner: ModelRunner, mode: str, steps: int) -> float:
    fused.use_fused(mode != "per-op")
    lora.MODE["lora"] = "stacked" if mode == "stacked" else "grouped"
    runner.step()  # the first of a block switches ways
    started = time.perf_counter()
    for _ in range(steps):
        runner.step()
    return len(runner.sequences) * steps / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--gguf", type=Path, default=ROOT / "var/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    parser.add_argument("--batch", type=int, default=12)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lora-mixed-") as workdir:
        folder = Path(workdir)
        spec = ModelSpec(model_id="demo", location=str(convert_gguf(args.gguf, folder / "m").path))
        pool = ModelPool(16 * 2**30)
        base = pool.get(spec)
        adapters = [
            pool.get(
                ModelSpec(
                    model_id=f"demo-lora-{n}",
                    location=str(random_adapter(base, folder / f"a{n}", args.rank, seed=n)),
                    base=spec,
                )
            )
            for n in (1, 2)
        ]
        print(
            f"{spec.model_id}: {base.compute_format}, kernels {base.kernels}; "
            f"2 adapters of rank {args.rank} on q_proj and v_proj "
            f"({adapters[0].nbytes / 2**20:.2f} MiB each); batch {args.batch}"
        )
        ways = {
            "base alone": (filled(base, [base], args.batch), "grouped"),
            "mixed, grouped": (filled(base, [base, *adapters], args.batch), "grouped"),
            "mixed, stacked": (filled(base, [base, *adapters], args.batch), "stacked"),
            # Where a mixed batch's cost goes: the base's rows alone, its blocks per-op (the
            # path an adapted block takes while an adapter row is in the batch).
            "base, per-op": (filled(base, [base], args.batch), "per-op"),
        }
        rates: dict[str, list[float]] = {way: [] for way in ways}
        for _ in range(args.rounds):
            for way, (runner, mode) in ways.items():
                rates[way].append(block_tokens_per_second(runner, mode, args.steps))
        alone = statistics.median(rates["base alone"])
        for way, values in rates.items():
            rate = statistics.median(values)
            print(f"{way:<16} {rate:8.1f} tok/s   {rate / alone:6.3f} of the base alone")
        for runner, _ in ways.values():
            runner.close()


if __name__ == "__main__":
    main()
