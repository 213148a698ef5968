"""Ours against llama-server at real widths, on the very same GGUF: random-weight models of the
shapes people run (weights' values do not change the cost) written as llama.cpp's converter
writes them (tests/support/gguf_writer.py, on SmolLM2's vocabulary) and quantized Q4_K_M by
llama-quantize; ours imports the file with `manage.py import_gguf`. One server at a time, in
alternating rounds, each figure the median over rounds, beside the machine's copy bandwidth:

    .venv/bin/python bench/real_width_peers.py [--shapes qwen3-1.7b,llama-3.2-1b] [--rounds 2]
        [--servers ours,llama-server] [--tokens 64] [--prompts 560,2058]

`--servers ours,ours-8bit,llama-server` adds ours again on the same import with the catalog's
activation rounding at 8bit (one byte, as llama.cpp's Q8 activations) instead of 15bit.

Per server and round: seconds from start until the first answer; one greedy stream's decoding
rate (tokens after the first over the time between them) and the share of the copy bandwidth
it reads its weights at (the bytes one token reads: the GGUF's tensors for llama-server, the
imported safetensors for ours); 8 greedy streams started together (tokens over the wall time);
prompt reading (a fresh prompt of N tokens, one token out); an agent's next turn (TTFT of a
second turn after a first one on an N-token system prompt). End tokens are banned so every
server decodes the same lengths.

GGUFs are made once into var/bench/real-width/<shape>.Q4_K_M.gguf (the float intermediate,
6 GB for the 1.7B shape, is removed): a few minutes each. Needs llama.cpp's tools
(scripts/build_llama_tools.sh and build_llama_server.sh build them, ~6 minutes the first time).
The MoE shape (Qwen3-30B-A3B's width, 8 of its 48 layers) is written tensor by tensor in
float16 (10 GB before quantizing), as is the hybrid (Qwen3.5-9B's width, 8 of its 32 layers).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # bench/ is on the path already, as for every bench script

from load import NO_EOS  # noqa: E402
from peers import (  # noqa: E402
    bench_env,
    import_ours,
    llama_server_binary,
    restart_ours,
    start_llama_server,
    stop,
)

from bench.kernels import copy_bandwidth  # noqa: E402

FOLDER = ROOT / "var" / "bench" / "real-width"
DEMO_GGUF = ROOT / "var" / "cache" / "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ID = "real-width"
SMOLLM_VOCAB = 49152
SHAPES = {  # Hugging Face configs (the real models' but for the vocabulary) and GGUF arch
    "qwen3-1.7b": ("qwen3", dict(model_type="qwen3", hidden_size=2048, num_hidden_layers=28,
                                 intermediate_size=6144, num_attention_heads=16,
                                 num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                                 max_position_embeddings=40960, rope_theta=1e6,
                                 tie_word_embeddings=True)),
    "llama-3.2-1b": ("llama", dict(model_type="llama", hidden_size=2048, num_hidden_layers=16,
                                   intermediate_size=8192, num_attention_heads=32,
                                   num_key_value_heads=8, head_dim=64, rms_norm_eps=1e-5,
                                   max_position_embeddings=131072, rope_theta=500000.0,
                                   tie_word_embeddings=True)),
    # Qwen3-30B-A3B at full width (128 experts of 768, 8 a token), 8 of its 48 layers: the
    # float checkpoint is streamed to the writer (a layer is 0.6B weights)
    "qwen3-30b-a3b-8l": ("qwen3moe", dict(model_type="qwen3_moe", hidden_size=2048,
                                          num_hidden_layers=8, intermediate_size=6144,
                                          num_attention_heads=32, num_key_value_heads=4,
                                          head_dim=128, num_experts=128, num_experts_per_tok=8,
                                          moe_intermediate_size=768, decoder_sparse_step=1,
                                          mlp_only_layers=[], norm_topk_prob=True,
                                          rms_norm_eps=1e-6, max_position_embeddings=40960,
                                          rope_theta=1e6, tie_word_embeddings=False)),
    # Qwen3.5-9B at full width, 8 of its 32 layers (three gated-delta layers to one attention
    # layer, as the model has them): 0.25B weights a layer, streamed like the MoE
    "qwen3.5-9b-8l": ("qwen35", dict(model_type="qwen3_5", hidden_size=4096, num_hidden_layers=8,
                                     intermediate_size=12288, num_attention_heads=16,
                                     num_key_value_heads=4, head_dim=256,
                                     full_attention_interval=4, linear_num_key_heads=16,
                                     linear_num_value_heads=32, linear_key_head_dim=128,
                                     linear_value_head_dim=128, linear_conv_kernel_dim=4,
                                     rope_parameters={"rope_type": "default",
                                                      "rope_theta": 10000000.0,
                                                      "partial_rotary_factor": 0.25,
                                                      "mrope_section": [11, 11, 10],
                                                      "mrope_interleaved": True},
                                     rms_norm_eps=1e-6, max_position_embeddings=262144,
                                     tie_word_embeddings=False)),
}  # fmt: skip
STREAMED = {"qwen3-30b-a3b-8l", "qwen3.5-9b-8l"}  # written tensor by tensor, in float16
SLOTS, SLOT_CONTEXT = 8, 2560
GREEDY_NO_EOS = {"temperature": 0, "logit_bias": NO_EOS}


class RandomWeights(Mapping):
    """Every tensor mlx-lm's model of the config holds (by its Hugging Face name), made when
    asked: N(0, 0.02) matrices, norms near one, each from its own seed (a checkpoint larger
    than memory is written one tensor at a time). The model is built lazily: only shapes
    are read."""

    def __init__(self, config: dict) -> None:
        import importlib

        from mlx.utils import tree_flatten

        module = importlib.import_module(f"mlx_lm.models.{config['model_type']}")
        model = module.Model(module.ModelArgs.from_dict(config))
        self.shapes = {name: tuple(p.shape) for name, p in tree_flatten(model.parameters())}

    def __getitem__(self, name: str) -> np.ndarray:
        rng = np.random.default_rng(list(self.shapes).index(name))
        values = rng.standard_normal(self.shapes[name], dtype=np.float32)
        if name.endswith("norm.weight"):
            return 1 + 0.1 * values
        values *= 0.02
        return values

    def __iter__(self):
        return iter(self.shapes)

    def __len__(self) -> int:
        return len(self.shapes)

    def active_share(self, config: dict) -> float:
        """The share of the weights one token reads: a mixture's token reads only the
        experts its router picks."""
        picked = config["num_experts_per_tok"] / config["num_experts"]
        total = active = 0
        for name, shape in self.shapes.items():
            size = int(np.prod(shape))
            total += size
            active += size * picked if ".switch_mlp." in name else size
        return active / total


def llama_tool(name: str) -> Path:
    found = subprocess.run(
        ["sh", str(ROOT / "scripts/build_llama_tools.sh")],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    return Path(found.stdout.strip().splitlines()[-1]) / name


def gguf_for(shape: str) -> Path:
    """The shape's Q4_K_M GGUF, made on first use."""
    from inference.conversion.gguf_file import read_metadata
    from tests.support.gguf_writer import write_gguf

    target = FOLDER / f"{shape}.Q4_K_M.gguf"
    if target.exists():
        return target
    arch, config = SHAPES[shape]
    config = {**config, "vocab_size": SMOLLM_VOCAB}
    FOLDER.mkdir(parents=True, exist_ok=True)
    print(f"writing {shape} (random float32, SmolLM2's vocabulary)...", flush=True)
    tokenizer = {k: v for k, v in read_metadata(DEMO_GGUF).items() if k.startswith("tokenizer.")}
    f32 = FOLDER / f"{shape}.f32.gguf"
    write_gguf(f32, arch, config, RandomWeights(config), tokenizer, streamed=shape in STREAMED)
    print(f"quantizing {shape} to Q4_K_M...", flush=True)
    partial = target.with_suffix(".partial")
    quantize = [str(llama_tool("llama-quantize")), str(f32), str(partial), "Q4_K_M"]
    done = subprocess.run(quantize, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"llama-quantize failed:\n{done.stderr[-4000:]}")
    f32.unlink()
    partial.rename(target)
    return target


def words(count: int, seed: int) -> str:
    """About `count` tokens of SmolLM2's vocabulary: common words in a seeded order (a fresh
    seed is a prompt no cache holds)."""
    vocabulary = "time year people way day man thing woman life child world school state family"
    pool = vocabulary.split()
    rng = random.Random(seed)
    return " ".join(rng.choice(pool) for _ in range(count))


async def stream(client: httpx.AsyncClient, url: str, body: dict) -> tuple[float, list[float]]:
    """(seconds to the first token, each later token's arrival) of one streamed chat."""
    started, arrivals, first = time.perf_counter(), [], None
    body = {"model": MODEL_ID, "stream": True, **GREEDY_NO_EOS, **body}
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            choices = json.loads(line[6:]).get("choices") or [{}]
            if choices[0].get("delta", {}).get("content"):  # not the role's empty opening
                now = time.perf_counter()
                if first is None:
                    first = now - started
                else:
                    arrivals.append(now)
    if first is None:
        raise RuntimeError(f"{url}: a stream without tokens")
    return first, arrivals


async def decode_rate(url: str, tokens: int) -> float:
    """One greedy stream: tokens after the first over the time between first and last."""
    ask = [{"role": "user", "content": "Write a long story about the sea."}]
    async with httpx.AsyncClient(timeout=600) as client:
        started = time.perf_counter()
        first, arrivals = await stream(client, url, {"messages": ask, "max_tokens": tokens})
    return len(arrivals) / (arrivals[-1] - started - first)


async def prompt_rate(url: str, length: int, seed: int) -> float:
    """Prompt tokens per second for a fresh prompt of about `length` tokens, one token out."""
    body = {
        "model": MODEL_ID,
        "prompt": words(length, seed),
        "max_tokens": 1,
        **GREEDY_NO_EOS,
    }
    async with httpx.AsyncClient(timeout=600) as client:
        started = time.perf_counter()
        reply = await client.post(f"{url}/v1/completions", json=body)
        elapsed = time.perf_counter() - started
    reply.raise_for_status()
    return reply.json()["usage"]["prompt_tokens"] / elapsed


async def next_turn(url: str, length: int, seed: int) -> float:
    """TTFT of an agent's second turn over an N-token system prompt the first turn read."""
    messages = [
        {"role": "system", "content": words(length, seed)},
        {"role": "user", "content": "Name a colour."},
    ]
    async with httpx.AsyncClient(timeout=600) as client:
        reply = await client.post(
            f"{url}/v1/chat/completions",
            json={"model": MODEL_ID, "messages": messages, "max_tokens": 16, **GREEDY_NO_EOS},
        )
        reply.raise_for_status()
        answer = reply.json()["choices"][0]["message"]["content"]
        messages += [
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "And another one?"},
        ]
        first, _ = await stream(client, url, {"messages": messages, "max_tokens": 2})
    return first


def first_answer(url: str, started: float) -> float:
    """Seconds from the server's start until its first (one-token) answer."""
    body = {"model": MODEL_ID, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    httpx.post(f"{url}/v1/chat/completions", json=body, timeout=600).raise_for_status()
    return time.perf_counter() - started


def measure(url: str, started: float, args: argparse.Namespace, seed: int) -> dict[str, float]:
    row = {"first answer s": first_answer(url, started)}
    row["1 stream tok/s"] = asyncio.run(decode_rate(url, args.tokens))
    eight = asyncio.run(burst_no_eos(url, SLOTS, args.tokens))
    row[f"{SLOTS} streams tok/s"] = eight
    for length in args.prompts:
        row[f"prompt {length} tok/s"] = asyncio.run(prompt_rate(url, length, seed + length))
    for length in args.turns:
        row[f"next turn {length} s"] = asyncio.run(next_turn(url, length, seed + 7 * length))
    return row


async def burst_no_eos(url: str, streams: int, tokens: int) -> float:
    """`streams` greedy streams started together: tokens over the wall time."""
    asks = [
        {"messages": [{"role": "user", "content": f"Tell story number {i}."}], "max_tokens": tokens}
        for i in range(streams)
    ]
    async with httpx.AsyncClient(timeout=1800, limits=httpx.Limits(max_connections=streams)) as c:
        started = time.perf_counter()
        results = await asyncio.gather(*(stream(c, url, ask) for ask in asks))
        elapsed = time.perf_counter() - started
    return sum(len(arrivals) + 1 for _, arrivals in results) / elapsed


# Our servers, by the catalog's activation rounding they run with.
OURS = {"ours": "15bit", "ours-8bit": "8bit"}


def prepare(server: str, workdir: Path) -> None:
    """What comes before a server's clock starts: ours, the catalog's activation rounding for
    it (the admin's setting, not part of a start); llama-server, finding its build."""
    if server not in OURS:
        llama_server_binary()
    else:
        env = bench_env(workdir, dict(os.environ))
        code = "from catalog.models import CatalogModel as M; "
        code += f"M.objects.update(activations={OURS[server]!r})"
        manage = [sys.executable, str(ROOT / "manage.py")]
        subprocess.run([*manage, "shell", "-c", code], env=env, check=True)


def start(server: str, gguf: Path, workdir: Path) -> tuple[subprocess.Popen, str]:
    if server in OURS:
        return restart_ours(workdir, dict(os.environ))
    return start_llama_server(gguf, SLOTS, dict(os.environ), SLOT_CONTEXT)


def weight_bytes(server: str, shape: str, gguf: Path, workdir: Path) -> int:
    """What one decoded token reads: every weight (the tied embedding is the output head), a
    mixture's experts at the share its router picks (by weight count, as if every tensor took
    as many bytes a weight)."""
    if server in OURS:
        files = (workdir / "models" / MODEL_ID).glob("*.safetensors")
        stored = sum(f.stat().st_size for f in files)
    else:
        stored = gguf.stat().st_size
    config = {**SHAPES[shape][1], "vocab_size": SMOLLM_VOCAB}
    if "num_experts" not in config:
        return stored
    return int(stored * RandomWeights(config).active_share(config))


def run_shape(shape: str, args: argparse.Namespace, copy_gbs: float) -> None:
    gguf = gguf_for(shape)
    workdir = Path(tempfile.mkdtemp(prefix="real-width-"))
    if any(s in OURS for s in args.servers):
        print(f"{shape}: importing {gguf.name} ({gguf.stat().st_size / 1e6:.0f} MB)", flush=True)
        import_ours(gguf, workdir, dict(os.environ), MODEL_ID)
    rows: dict[str, list[dict[str, float]]] = {server: [] for server in args.servers}
    for round_ in range(args.rounds):
        for server in args.servers if round_ % 2 == 0 else args.servers[::-1]:
            prepare(server, workdir)
            started = time.perf_counter()
            process, url = start(server, gguf, workdir)
            try:
                rows[server].append(measure(url, started, args, seed=100 * round_))
            finally:
                stop(process)
            print(f"  round {round_ + 1} {server}: {rows[server][-1]}", flush=True)
    nbytes = {s: weight_bytes(s, shape, gguf, workdir) for s in args.servers}
    report(shape, rows, nbytes, copy_gbs)


def report(
    shape: str, rows: dict[str, list[dict]], nbytes: dict[str, int], copy_gbs: float
) -> None:
    servers = list(rows)
    medians = {s: {k: statistics.median(r[k] for r in rows[s]) for k in rows[s][0]} for s in rows}
    print(f"\n{shape}: medians of {len(rows[servers[0]])} rounds")
    print(f"{'':<22}" + "".join(f"{s:>14}" for s in servers) + "   ours ahead")
    for key in medians[servers[0]]:
        values = [medians[s][key] for s in servers]
        line = f"{key:<22}" + "".join(f"{v:14.2f}" for v in values)
        if "llama-server" in servers:
            peer = medians["llama-server"][key]
            for ours in (medians[s][key] for s in servers if s in OURS):
                line += f"   x{(peer / ours if key.endswith(' s') else ours / peer):.2f}"
        print(line)
    for server in servers:
        rate = medians[server]["1 stream tok/s"] * nbytes[server] / 1e9
        print(
            f"{server}: a token reads {nbytes[server] / 1e6:.0f} MB; one stream reads "
            f"{rate:.1f} GB/s = {rate / copy_gbs:.2f} of the copy bandwidth"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--servers", default="ours,llama-server")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--prompts", default="560,2058")
    parser.add_argument("--turns", default="500,2000")
    args = parser.parse_args()
    args.servers = args.servers.split(",")
    args.prompts = [int(n) for n in args.prompts.split(",") if n]
    args.turns = [int(n) for n in args.turns.split(",") if n]
    copy_gbs = copy_bandwidth()
    print(f"copy bandwidth {copy_gbs:.1f} GB/s (read + write)", flush=True)
    for shape in args.shapes.split(","):
        run_shape(shape, args, copy_gbs)


if __name__ == "__main__":
    main()
