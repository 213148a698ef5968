"""Embedding throughput of the engine (inputs per second) at batch sizes 1 and 64.

    .venv/bin/python bench/embeddings.py [--model DIR] [--batches 1,64] [--seconds 5]

DIR defaults to var/cache/all-MiniLM-L6-v2 (`make serve` and `make test` unpack it) and,
without it, a random-weight BERT built as the tests build theirs. Each batch size sends
requests of that many inputs (sentences of 8 to 40 words) one after another for about
--seconds, through the engine thread as the server does (tokenizing, padding, one forward
pass per step), without HTTP.
"""

from __future__ import annotations

import argparse
import queue
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inference import blas

blas.preload()  # before MLX is imported, as the server's settings do

from inference.engine.config import EngineConfig  # noqa: E402
from inference.engine.types import Embedded, EmbeddingJob, ModelSpec  # noqa: E402
from inference.engine.worker import Engine  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "var/cache/all-MiniLM-L6-v2"


def sentences(count: int, seed: int) -> list[str]:
    from tests.support.embedding_models import WORDS

    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(8, 40))) for _ in range(count)]


def embed(engine: Engine, spec: ModelSpec, inputs: list[str]) -> Embedded:
    answers: queue.SimpleQueue = queue.SimpleQueue()
    engine.submit(EmbeddingJob(spec, list(inputs), answers.put))
    answer = answers.get(timeout=600)
    if not isinstance(answer, Embedded):
        raise SystemExit(f"embedding failed: {answer}")
    return answer


def measure(engine: Engine, spec: ModelSpec, batch: int, seconds: float) -> tuple[float, float]:
    """(inputs per second, tokens per second) over requests of `batch` inputs."""
    embed(engine, spec, sentences(batch, seed=0))  # warm-up: shapes, caches
    inputs = tokens = 0
    started = time.perf_counter()
    request = 1
    while time.perf_counter() - started < seconds:
        answer = embed(engine, spec, sentences(batch, seed=request))
        inputs += batch
        tokens += answer.prompt_tokens
        request += 1
    elapsed = time.perf_counter() - started
    return inputs / elapsed, tokens / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT if DEFAULT.is_dir() else None)
    parser.add_argument("--batches", default="1,64")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    folder = args.model
    if folder is None:
        from tests.support.embedding_models import build_encoder_embedder

        folder = build_encoder_embedder(Path(tempfile.mkdtemp()) / "bert")
    spec = ModelSpec("bench", str(folder), purpose="embedding")
    engine = Engine(EngineConfig(cpu_kernels=False))  # they serve mlx-lm chat models only
    try:
        load = engine.call(lambda e: e.warm(spec)).result(timeout=600)
        print(
            f"model: {folder} ({load['bytes'] / 2**20:.1f} MiB, loaded in {load['load_seconds']} s)"
        )
        print(f"{'batch':>6} {'inputs/s':>10} {'tokens/s':>10}")
        for batch in (int(b) for b in args.batches.split(",")):
            per_input, per_token = measure(engine, spec, batch, args.seconds)
            print(f"{batch:>6} {per_input:>10.1f} {per_token:>10.0f}")
    finally:
        engine.stop()


if __name__ == "__main__":
    main()
