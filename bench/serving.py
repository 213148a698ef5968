"""Serving benchmark: our server against its peers on the same model, in one run.

    .venv/bin/python bench/serving.py [--concurrency 1,8,32] [--churn 16] \
        [--servers ours,mlx_lm.server-f32,llama-server]

Peers: mlx_lm.server on the same converted weights (stock, or float32 with OpenBLAS: its best
case on a CPU) and llama.cpp's llama-server on the very GGUF we import, with a slot per client
(built once by scripts/build_llama_server.sh); `ours-no-kernels` is ours with CPU_KERNELS=false
(a machine where kernels/ did not build). Modes:
- burst c=N: N greedy streams of --max-tokens started together;
- churn N: N clients in a closed loop for --churn-seconds, answers of 16-160 tokens drawn from
  a seeded generator (end tokens banned, so every server generates the same lengths), sampling
  sent explicitly (--temperature, --top-p) so every server samples alike;
- multi-turn: a 1,000-token system prompt over four turns (cold vs warm TTFT);
- code edit c=N (--code-edit): N greedy streams returning a 237-line file with a name changed
  (answers cut at --code-edit-tokens), ours also with n-gram speculation asked per request
  (`edit c=N spec`), llama-server-ngram being llama-server with its own `--spec-type`.
Prints raw mlx_lm.stream_generate speed, each row as it comes, then one table of every server
and mode, and ours/peer ratios. Loopback only; every loop is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from load import NO_EOS, abuse, burst, churn, code_edit, multi_turn
from peers import (
    DEMO_ID,
    ROOT,
    peak_rss_mib,
    start_llama_server,
    start_ours,
    start_peer,
    start_peer_float32,
)

SERVERS = (
    "ours",
    "ours-no-kernels",
    "mlx_lm.server",
    "mlx_lm.server-f32",
    "llama-server",
    "llama-server-ngram",
)
SPECULATIVE = {"speculative": "ngram"}  # ours: prompt-lookup drafts, asked per request
LLAMA_NGRAM = ("--spec-type", "ngram-simple", "--spec-draft-n-max", "8")
Servers = dict[str, tuple[subprocess.Popen, str, str]]


def raw_stream_generate(model_dir: Path, max_tokens: int) -> float:
    """mlx-lm's own single-stream speed on the stored weights, for reference."""
    from mlx_lm import load, stream_generate

    model, tokenizer = load(str(model_dir))
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Write a long story about dragons."}],
        add_generation_prompt=True,
    )
    responses = list(stream_generate(model, tokenizer, prompt, max_tokens=max_tokens))
    return responses[-1].generation_tps


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--gguf", type=Path, default=ROOT / "var/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    parser.add_argument("--concurrency", default="1,8,32", help="burst levels ('' for none)")
    parser.add_argument("--max-tokens", type=int, default=64, help="per burst stream")
    parser.add_argument("--churn", default="", help="churn client counts, e.g. 16 or 16,32")
    parser.add_argument("--churn-seconds", type=float, default=60)
    parser.add_argument("--temperature", type=float, default=0.7, help="churn sampling")
    parser.add_argument("--top-p", type=float, default=0.9, help="churn sampling")
    parser.add_argument("--seed", type=int, default=0, help="churn's answer lengths and topics")
    parser.add_argument(
        "--servers",
        default="ours,mlx_lm.server",
        help=f"comma-separated, from: {', '.join(SERVERS)} (mlx_lm.server is its stock "
        "setup: stored 4-bit weights, bundled BLAS)",
    )
    parser.add_argument("--skip-multi-turn", action="store_true")
    parser.add_argument("--code-edit", default="", help="code-edit stream counts, e.g. 1,8")
    parser.add_argument("--code-edit-tokens", type=int, default=256)
    parser.add_argument(
        "--abuse",
        type=float,
        default=0,
        help="seconds per phase of the abusive-request scenario (ours only; 0: skip)",
    )
    args = parser.parse_args()
    args.levels = [int(c) for c in args.concurrency.split(",") if c]
    args.churn_clients = [int(c) for c in args.churn.split(",") if c]
    args.edit_levels = [int(c) for c in args.code_edit.split(",") if c]
    unknown = set(args.servers.split(",")) - set(SERVERS)
    if unknown:
        parser.error(f"unknown servers: {', '.join(sorted(unknown))}")
    return args


def start_servers(args: argparse.Namespace, workdir: Path, env: dict, servers: Servers) -> Path:
    """Ours first (it converts the GGUF the MLX peers then load), then the peers asked for;
    each joins `servers` as it starts, so the caller stops them even if a later one fails."""
    wanted = args.servers.split(",")
    ours, ours_url, model_dir = start_ours(args.gguf, workdir, env)
    if "ours" in wanted:
        servers["ours"] = (ours, ours_url, DEMO_ID)
    else:
        ours.terminate()
    if "ours-no-kernels" in wanted:  # a machine where kernels/ did not build
        (workdir / "no-kernels").mkdir()
        plain, plain_url, _ = start_ours(
            args.gguf, workdir / "no-kernels", {**env, "CPU_KERNELS": "false"}
        )
        servers["ours-no-kernels"] = (plain, plain_url, DEMO_ID)
    if "mlx_lm.server" in wanted:
        peer, peer_url = start_peer(model_dir, env)
        servers["mlx_lm.server"] = (peer, peer_url, str(model_dir))
    if "mlx_lm.server-f32" in wanted:
        peer, peer_url = start_peer_float32(model_dir, workdir, env)
        servers["mlx_lm.server-f32"] = (peer, peer_url, str(workdir / "float32"))
    slots = max([*args.levels, *args.churn_clients, *args.edit_levels, 1])
    for name, extra in (("llama-server", ()), ("llama-server-ngram", LLAMA_NGRAM)):
        if name in wanted:  # the code edit's prompt and answer need slots of 4k
            context = 4096 if args.edit_levels else 1024
            peer, peer_url = start_llama_server(args.gguf, slots, env, context, extra=extra)
            servers[name] = (peer, peer_url, DEMO_ID)
    return model_dir


def show(name: str, mode: str, row: dict) -> None:
    print(
        f"{name:>18} {mode:<9} {row['tok_s']:6.1f} tok/s  "
        f"TTFT p50 {row['ttft_p50']:6.2f}s p95 {row['ttft_p95']:6.2f}s  "
        f"ITL p50 {row['itl_p50'] * 1000:5.0f}ms p95 {row['itl_p95'] * 1000:5.0f}ms  "
        f"({row['tokens']} tokens, {row['streams']} streams)"
        + (f"  {row['failed']} FAILED: {row['first_error']}" if row["failed"] else ""),
        flush=True,
    )


def report_abuse(result: dict) -> None:
    alone, beside = result["alone"], result["beside"]
    show("ours", "8 alone", alone)
    show("ours", "8 + big", beside)
    print(
        f"{'':>18} beside the big request: ITL p95 x{beside['itl_p95'] / alone['itl_p95']:.2f}, "
        f"TTFT p95 {beside['ttft_p95']:.2f}s; its sequences left "
        f"{result['freed_seconds']:.2f}s after its client went",
        flush=True,
    )


def measure(name: str, url: str, model: str, args: argparse.Namespace) -> dict[str, dict]:
    """One server's rows by mode, printed as they come."""
    rows = {}
    asyncio.run(burst(url, model, 1, 8))  # warm-up: load and first compile
    for level in args.levels:
        rows[f"c={level}"] = asyncio.run(burst(url, model, level, args.max_tokens))
        show(name, f"c={level}", rows[f"c={level}"])
    sampling = {"temperature": args.temperature, "top_p": args.top_p, "logit_bias": NO_EOS}
    for clients in args.churn_clients:
        row = asyncio.run(churn(url, model, clients, args.churn_seconds, sampling, args.seed))
        rows[f"churn {clients}"] = row
        show(name, f"churn {clients}", row)
    for streams in args.edit_levels:
        asks = {f"edit c={streams}": {}}
        if name == "ours":
            asks[f"edit c={streams} spec"] = SPECULATIVE
        for mode, extra in asks.items():
            rows[mode] = asyncio.run(code_edit(url, model, streams, args.code_edit_tokens, extra))
            show(name, mode, rows[mode])
    if args.abuse and name == "ours":
        report_abuse(asyncio.run(abuse(url, model, seconds=args.abuse)))
    if not args.skip_multi_turn:
        turns = asyncio.run(multi_turn(url, model))
        print(
            f"{name:>18} multi-turn: cold TTFT {turns['cold_ttft']:.2f}s, warm TTFT "
            f"{turns['warm_ttft']:.2f}s ({turns['warm_ttft'] / turns['cold_ttft']:.2f}x)"
        )
    return rows


def print_table(table: dict[str, dict[str, dict]], rss: dict[str, float]) -> None:
    modes = list(dict.fromkeys(mode for rows in table.values() for mode in rows))
    print(
        f"\n{'mode':<15}{'server':<19}{'tok/s':>7}{'TTFT p50':>10}{'p95':>7}"
        f"{'ITL p95':>9}{'failed':>8}{'peak RSS':>10}"
    )
    for mode in modes:
        for name, rows in table.items():
            if mode in rows:
                r = rows[mode]
                print(
                    f"{mode:<15}{name:<19}{r['tok_s']:7.1f}{r['ttft_p50']:9.2f}s"
                    f"{r['ttft_p95']:6.2f}s{r['itl_p95'] * 1000:7.0f}ms{r['failed']:8d}"
                    f"{rss.get(name, float('nan')):8.0f}MiB"
                )
    for peer in [name for name in table if name != "ours"] if "ours" in table else []:
        ratios = ", ".join(
            f"{mode} {table['ours'][mode]['tok_s'] / table[peer][mode]['tok_s']:.2f}x"
            for mode in modes
            if mode in table[peer] and table[peer][mode]["tok_s"]
        )
        print(f"ours/{peer} throughput: {ratios}")


def main() -> None:
    args = parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-"))
    servers: Servers = {}
    try:
        model_dir = start_servers(args, workdir, dict(os.environ), servers)
        raw = raw_stream_generate(model_dir, args.max_tokens)
        print(f"raw mlx_lm.stream_generate: {raw:.1f} tok/s (single stream)")
        table, rss = {}, {}
        for name, (process, url, model) in servers.items():
            table[name] = measure(name, url, model, args)
            rss[name] = peak_rss_mib(process.pid) or float("nan")
        print_table(table, rss)
        if "ours" in table and "c=1" in table["ours"]:
            print(f"ours at c=1 vs raw stream_generate: {table['ours']['c=1']['tok_s'] / raw:.2f}x")
    finally:
        for process, _, _ in servers.values():
            process.terminate()
            process.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
