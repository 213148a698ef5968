"""A 2-rank MLX group (ring backend, loopback) against one process, same model, same load, for
this server and for mlx_lm.server (whose distributed mode shares requests the same way).

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

sys.path.insert(0, str(ROOT))  # the project's packages, imported where they are needed
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
        "API_KEY_MAX_CONCURRENT": "0",  # the anonymous streams: every level at once
        "LOG_LEVEL": "WARNING",
    }
    if threads:  # two ranks on one machine: one core each
        env |= {"CPU_KERNEL_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads)}
    return env


def ranks_env(env: dict, ranks: int, hosts: Path) -> list[dict]:
    """What mlx.launch --backend ring would give each rank on one host."""
    if ranks == 1:
        return [env]
    hosts.write_text(json.dumps([[f"127.0.0.1:{free_port()}"] for _ in range(ranks)]))
    return [{**env, "MLX_RANK": str(r), "MLX_HOSTFILE": str(hosts)} for r in range(ranks)]


def start_ours(model: Path, workdir: Path, ranks: int) -> tuple[list[subprocess.Popen], str, str]:
    env = server_env(workdir, 1 if ranks > 1 else None)
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "-v0"], env=env, check=True)
    parallel = ["--parallel", "tensor"] if ranks > 1 else []
    add = ["add_model", MODEL_ID, "--local", str(model), "--compute-format", "float32"]
    subprocess.run([*manage, *add, *parallel], env=env, check=True, stdout=subprocess.DEVNULL)
    port = free_port()
    serve = ["serve", "--port", str(port), "--log-level", "warning"]
    processes = [
        subprocess.Popen([*manage, *(serve if rank == 0 else ["serve", "--follower"])], env=e)
        for rank, e in enumerate(ranks_env(env, ranks, workdir / "hosts.json"))
    ]
    url = f"http://127.0.0.1:{port}"
    wait_up(url, processes[0], "/health/ready")
    return processes, url, MODEL_ID


def start_mlx_lm(model: Path, workdir: Path, ranks: int) -> tuple[list[subprocess.Popen], str, str]:
    """mlx_lm.server on the same float32 weights with OpenBLAS preloaded (its best case on a
    CPU, as bench/peers.py runs it); over a group it shards tensor-parallel."""
    from inference.blas import find_openblas

    library = find_openblas()
    if library is None:
        raise SystemExit("mlx_lm.server needs OpenBLAS here (Debian: libopenblas0-pthread)")
    env = {**server_env(workdir, 1 if ranks > 1 else None), "LD_PRELOAD": library}
    port = free_port()
    argv = [sys.executable, "-m", "mlx_lm", "server", "--model", str(model), "--port", str(port)]
    processes = [
        subprocess.Popen(argv, env=e, stderr=subprocess.DEVNULL)
        for e in ranks_env(env, ranks, workdir / "hosts.json")
    ]
    url = f"http://127.0.0.1:{port}"
    wait_up(url, processes[0], "/v1/models")
    return processes, url, str(model)


def stop(processes: list[subprocess.Popen]) -> None:
    """Rank 0 first, gently: its engine's last turn tells the followers to stop."""
    processes[0].terminate()
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def streams(url: str, model: str, concurrency: int, tokens: int) -> dict:
    sampling = {**GREEDY, "logit_bias": NO_EOS}
    prompts = [
        [{"role": "user", "content": f"Write about {TOPICS[i % len(TOPICS)]}."}]
        for i in range(concurrency)
    ]
    async with httpx.AsyncClient(timeout=1800) as client:
        await one_stream(client, url, model, prompts[0], 4, sampling)  # loads the model
        started = time.perf_counter()
        outcomes = await asyncio.gather(
            *(one_stream(client, url, model, p, tokens, sampling) for p in prompts),
            return_exceptions=True,
        )
        return summarise(list(outcomes), time.perf_counter() - started)


def collective_ms(rounds: int = 300) -> float:
    """One small all_sum between two ranks on loopback, as a turn's first message is (median)."""
    script = (
        "import statistics, time, mlx.core as mx\n"
        "g = mx.distributed.init(strict=True, backend='ring')\n"
        "x = mx.zeros((2048,), dtype=mx.uint8)\n"
        "times = []\n"
        f"for i in range({rounds} + 20):\n"
        "    t = time.perf_counter()\n"
        "    mx.eval(mx.distributed.all_sum(x, stream=mx.cpu))\n"
        "    times.append(time.perf_counter() - t)\n"
        "print(statistics.median(times[20:]) * 1000)\n"  # the median: a busy core only slows
    )
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-c", script]
        ranks = [
            subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
            for env in ranks_env(dict(os.environ), 2, Path(tmp) / "hosts.json")
        ]
        return float(ranks[0].communicate()[0].strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gguf", type=Path, required=True)
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    servers = {"ours": start_ours, "mlx_lm.server": start_mlx_lm}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(args.gguf, Path(tmp))
        for name, start in servers.items():
            for ranks in (1, 2):
                workdir = Path(tmp) / f"{name}-{ranks}"
                workdir.mkdir()
                processes, url, model_name = start(model, workdir, ranks)
                try:
                    for c in levels:
                        result = asyncio.run(streams(url, model_name, c, args.tokens))
                        rows.append((name, ranks, c, result))
                finally:
                    stop(processes)
    header_ms = collective_ms()
    print(f"\nall_sum of a turn's 2 KiB header, 2 ranks, loopback (median): {header_ms:.3f} ms")
    print("\n| server | setup | c | tok/s | ITL p50 ms | TTFT p50 ms | failed |")
    print("|---|---|---|---|---|---|---|")
    for name, ranks, c, r in rows:
        setup = "one process" if ranks == 1 else "2-rank group (tensor, ring)"
        print(
            f"| {name} | {setup} | {c} | {r['tok_s']:.1f} | {r['itl_p50'] * 1000:.1f} | "
            f"{r['ttft_p50'] * 1000:.0f} | {r['failed']} |"
        )


if __name__ == "__main__":
    main()
