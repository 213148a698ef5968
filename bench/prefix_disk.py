"""A conversation's next turn with its prefix from memory, and from disk after a "restart".

    .venv/bin/python bench/prefix_disk.py [--sizes 1000,5000] [--new 40] [--repeats 3]

In-process, on the demo model as the server runs it: for each prefix size a first turn is read
cold by a runner with the disk tier on (its prompt written to a fresh folder), then the next
turn (the prefix plus `--new` tokens, `max_tokens: 1`) is timed on that runner (the prefix in
memory) and on a new runner over a reopened store of the same folder, as after a restart (the
prefix read from disk), alternately, `--repeats` times; medians. Also the write: the writer
thread's time and the file's size per 1k tokens.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inference import blas

blas.preload()  # before MLX is imported, as the server's settings do

from bench.profile import load_demo  # noqa: E402
from inference.engine import kv_file, prefix_disk  # noqa: E402
from inference.engine.batching import ModelRunner  # noqa: E402
from inference.engine.config import EngineConfig  # noqa: E402
from inference.engine.pool import LoadedModel  # noqa: E402
from inference.engine.sequence import Sequence  # noqa: E402
from inference.engine.types import GenerationJob, SamplingParams, TokenPrompt  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def turn(runner: ModelRunner, loaded: LoadedModel, ids: list[int]) -> tuple[float, int]:
    """Seconds to the first token of one prompt, and the tokens it found cached."""
    params = SamplingParams(temperature=0, max_tokens=1)
    sequence = Sequence(
        GenerationJob(loaded.spec, TokenPrompt(tuple(ids)), params, lambda e: None), loaded
    )
    started = time.perf_counter()
    runner.add(sequence)
    while runner.busy:
        runner.step()
    return time.perf_counter() - started, sequence.cached_tokens


def measure(loaded: LoadedModel, size: int, new: int, repeats: int, folder: Path) -> dict:
    config = EngineConfig(
        prompt_cache_bytes=4 * 2**30,
        prefix_cache_dir=str(folder),
        prefix_cache_disk_min_tokens=min(512, size),
    )
    base = [random.randrange(100, 40000) for _ in range(size)]
    warm = ModelRunner(loaded, config)
    cold, _ = turn(warm, loaded, base)
    store = prefix_disk.shared(config)
    started = time.perf_counter()
    store.flush()
    flushed = time.perf_counter() - started
    memory, disk, cached = [], [], set()
    for _ in range(repeats):
        # Each turn its own new tokens: a turn's own prompt, written to disk, must not serve
        # the next one whole.
        follow_up = base + [random.randrange(100, 40000) for _ in range(new)]
        seconds, reused = turn(warm, loaded, follow_up)
        memory.append(seconds)
        cached.add(("memory", reused))
        warm.prefixes.disk.flush()  # its prompt's write, done before the restart
        prefix_disk.shared(config).close()  # a restart: the next store reads the folder anew
        follow_up = base + [random.randrange(100, 40000) for _ in range(new)]
        restarted = ModelRunner(loaded, config)
        seconds, reused = turn(restarted, loaded, follow_up)
        disk.append(seconds)
        cached.add(("disk", reused))
        restarted.prefixes.disk.flush()
    (file,) = folder.glob(f"*-{size - 1}-{kv_file.token_digest(base[:-1])}.kv")
    return {
        "tokens": base[:-1],
        "cold": cold,
        "memory": statistics.median(memory),
        "all": (memory, disk),
        "disk": statistics.median(disk),
        "cached": sorted(cached),
        "file_bytes": file.stat().st_size,
        "flush_after_turn": flushed,
    }


def write_time(tokens: list[int], folder: Path) -> tuple[float, float]:
    """Median seconds of the writer thread's work for the entry of `tokens` in `folder`
    (rewritten beside it; the engine thread's part, views of evaluated arrays, is not
    counted), and of reading it back whole (checksum, arrays, cache layers)."""
    (path,) = folder.glob(f"*-{len(tokens)}-{kv_file.token_digest(tokens)}.kv")
    writes, reads = [], []
    for i in range(3):
        started = time.perf_counter()
        layers = kv_file.read(path, tokens)
        reads.append(time.perf_counter() - started)
        prepared = kv_file.prepare(tokens, layers)
        started = time.perf_counter()
        kv_file.write(folder / f"copy{i}.bin", prepared)
        writes.append(time.perf_counter() - started)
    return statistics.median(writes), statistics.median(reads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--gguf", type=Path, default=ROOT / "var/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    parser.add_argument("--sizes", default="1000,5000")
    parser.add_argument("--new", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    random.seed(0)
    with tempfile.TemporaryDirectory(prefix="prefix-disk-") as workdir:
        loaded = load_demo(args.gguf, Path(workdir))
        print(f"computing in {loaded.compute_format}, kernels {loaded.kernels}")
        print(
            "| prefix | cold | next turn, memory | next turn, disk (restart) | disk/memory "
            "| file | file per 1k tokens | write (writer thread) | write per 1k tokens "
            "| read (file to cache) |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        for size in [int(s) for s in args.sizes.split(",")]:
            folder = Path(workdir) / f"cache-{size}"
            result = measure(loaded, size, args.new, args.repeats, folder)
            write, read = write_time(result["tokens"], folder)
            mib = result["file_bytes"] / 2**20
            print(
                f"| {size} | {result['cold']:.2f} s | {result['memory'] * 1000:.0f} ms "
                f"| {result['disk'] * 1000:.0f} ms | {result['disk'] / result['memory']:.2f}x "
                f"| {mib:.1f} MiB | {mib / size * 1000:.1f} MiB | {write * 1000:.0f} ms "
                f"| {write / size * 1e6:.1f} ms | {read * 1000:.0f} ms |"
            )
            memory, disk = result["all"]
            print(f"    cached {result['cached']}; memory {ms(memory)}; disk {ms(disk)}")


def ms(seconds: list[float]) -> str:
    return ", ".join(f"{s * 1000:.0f}" for s in seconds) + " ms"


if __name__ == "__main__":
    main()
