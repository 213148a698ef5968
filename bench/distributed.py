"""A 2-rank MLX group (ring backend, loopback) against one process, same model, same load.

The model is SmolLM2-135M's shape with random weights and 8/4 attention heads (the real
SmolLM2 has 9/3, which two ranks cannot split), in float32, with SmolLM2's tokenizer; every
stream is greedy with the end tokens banned, so each one generates exactly --tokens tokens.
On one machine the two ranks share its cores: the figure says what the group's collectives
cost per step, not what two hosts would gain.

    .venv/bin/python bench/distributed.py --gguf var/cache/SmolLM2-135M-Instruct.Q4_1.gguf
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from load import GREEDY, NO_EOS, TOPICS, one_stream, summarise
from peers import ROOT, free_port, wait_up

MODEL_ID = "smollm2-shaped"
SHAPE = {
    "model_type": "llama",
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-5,
    "rope_theta": 100000.0,
    "tie_word_embeddings": True,
    "max_position_embeddings": 8192,
}


def build_model(gguf: Path, workdir: Path) -> Path:
    """Imports the demo GGUF once (for its tokenizer), then writes the random-weight model."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models.llama import Model, ModelArgs

    sys.path.insert(0, str(ROOT))
    from inference.conversion.gguf import convert_gguf

    convert_gguf(gguf, workdir / "tok")
    target = workdir / MODEL_ID
    target.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(workdir / "tok" / name, target / name)
    vocab = len(json.loads((target / "tokenizer.json").read_text())["model"]["vocab"])
    config = {**SHAPE, "vocab_size": vocab}
    (target / "config.json").write_text(json.dumps(config))
    mx.random.seed(0)
    model = Model(ModelArgs.from_dict(config))
    weights = {k: v.astype(mx.float32) * 0.5 for k, v in tree_flatten(model.parameters())}
    mx.save_safetensors(str(target / "model.safetensors"), weights)
    return target


def server_env(workdir: Path, threads: int | None) -> dict:
    env = {
        **os.environ,
        "VAR_DIR": str(workdir),
        "DATABASE_URL": f"sqlite:///{workdir / 'db.sqlite3'}",
        "REQUIRE_API_KEY": "false",
        "LOG_LEVEL": "WARNING",
    }
    if threads:  # two ranks on one machine: one core each
        env |= {"CPU_KERNEL_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads)}
    return env


def start(model: Path, workdir: Path, ranks: int) -> tuple[list[subprocess.Popen], str]:
    env = server_env(workdir, 1 if ranks > 1 else None)
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "-v0"], env=env, check=True)
    parallel = ["--parallel", "tensor"] if ranks > 1 else []
    add = ["add_model", MODEL_ID, "--local", str(model), "--compute-format", "float32"]
    subprocess.run([*manage, *add, *parallel], env=env, check=True, stdout=subprocess.DEVNULL)
    port, hosts = free_port(), workdir / "hosts.json"
    hosts.write_text(json.dumps([[f"127.0.0.1:{free_port()}"] for _ in range(ranks)]))
    processes = []
    for rank in range(ranks):
        argv = ["serve", "--port", str(port), "--log-level", "warning"]
        rank_env = env if ranks == 1 else {**env, "MLX_RANK": str(rank), "MLX_HOSTFILE": str(hosts)}
        argv = argv if rank == 0 else ["serve", "--follower"]
        processes.append(subprocess.Popen([*manage, *argv], env=rank_env))
    url = f"http://127.0.0.1:{port}"
    wait_up(url, processes[0], "/health/ready")
    return processes, url


def stop(processes: list[subprocess.Popen]) -> None:
    """Rank 0 first, gently: its engine's last turn tells the followers to stop."""
    processes[0].terminate()
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def streams(url: str, concurrency: int, tokens: int) -> dict:
    sampling = {**GREEDY, "logit_bias": NO_EOS}
    prompts = [
        [{"role": "user", "content": f"Write about {TOPICS[i % len(TOPICS)]}."}]
        for i in range(concurrency)
    ]
    async with httpx.AsyncClient(timeout=1800) as client:
        await one_stream(client, url, MODEL_ID, prompts[0], 4, sampling)  # loads the model
        started = time.perf_counter()
        outcomes = await asyncio.gather(
            *(one_stream(client, url, MODEL_ID, p, tokens, sampling) for p in prompts),
            return_exceptions=True,
        )
        return summarise(list(outcomes), time.perf_counter() - started)


def collective_ms(rounds: int = 300) -> float:
    """One small all_sum between two ranks on loopback, as a turn's first message is."""
    script = (
        "import time, mlx.core as mx\n"
        "g = mx.distributed.init(strict=True, backend='ring')\n"
        "x = mx.zeros((2048,), dtype=mx.uint8)\n"
        "for _ in range(20): mx.eval(mx.distributed.all_sum(x, stream=mx.cpu))\n"
        "t = time.perf_counter()\n"
        f"for _ in range({rounds}): mx.eval(mx.distributed.all_sum(x, stream=mx.cpu))\n"
        f"print((time.perf_counter() - t) / {rounds} * 1000)\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        hosts = Path(tmp) / "hosts.json"
        hosts.write_text(json.dumps([[f"127.0.0.1:{free_port()}"] for _ in range(2)]))
        ranks = [
            subprocess.Popen(
                [sys.executable, "-c", script],
                env={**os.environ, "MLX_RANK": str(r), "MLX_HOSTFILE": str(hosts)},
                stdout=subprocess.PIPE,
                text=True,
            )
            for r in range(2)
        ]
        return float(ranks[0].communicate()[0].strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gguf", type=Path, required=True)
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(args.gguf, Path(tmp))
        for ranks in (1, 2):
            workdir = Path(tmp) / f"ranks{ranks}"
            workdir.mkdir()
            processes, url = start(model, workdir, ranks)
            try:
                for c in levels:
                    result = asyncio.run(streams(url, c, args.tokens))
                    rows.append((ranks, c, result))
            finally:
                stop(processes)
    print(
        f"\none all_sum of a turn's header (2 KiB), 2 ranks on loopback: {collective_ms():.3f} ms"
    )
    print("\n| setup | c | tok/s | ITL p50 ms | TTFT p50 ms | failed |")
    print("|---|---|---|---|---|---|")
    for ranks, c, r in rows:
        setup = "one process" if ranks == 1 else "2-rank group (tensor, ring)"
        print(
            f"| {setup} | {c} | {r['tok_s']:.1f} | {r['itl_p50'] * 1000:.1f} | "
            f"{r['ttft_p50'] * 1000:.0f} | {r['failed']} |"
        )


if __name__ == "__main__":
    main()
