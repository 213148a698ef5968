"""Agent turns at cache speed: our server against llama.cpp's llama-server on the same GGUF (the
demo SmolLM2-135M; its context stretched on both so the prompts fit: the figures are about
reading prompts, not about answers), one request at a time, answers cut short.

    .venv/bin/python bench/agent.py [--sizes 512,2048,5000,8000] [--replay [N]] [--restart]
        [--recorded] [--servers ours,llama-server] [--gguf PATH] [--repeat R]

Modes (any together; --sizes alone when none is named):
- --sizes: per size a cold chat whose prompt is ~N tokens (max_tokens 1, streamed), then its
  next turn (the same messages, the answer, and a ~40-token user message like a tool result):
  seconds, prompt tok/s, the cached tokens each server reports, and the ratios ours/llama.
- --replay N: a scripted Claude Code session of N turns (bench/agent_session.py: the recorded
  system prompt, billing header and tools, then tool calls and results of a few hundred to ~2k
  tokens) on both servers' Anthropic Messages endpoint: per turn prompt tokens, TTFT, prefill
  tok/s of the turn's new tokens, cache hits, each server's RSS.
- --restart: ours only: a cold turn of --restart-size tokens, its next turn, then the server
  stopped and started again on the same VAR_DIR (a disk tier of the prefix cache can then
  serve the follow-up) and a follow-up timed: in-memory next turn vs after restart.
- --recorded: the recorded 3-turn Claude Code and Codex sessions (tests/fixtures/agents/) as
  they were sent, then two Claude Code first turns that differ only in the billing-header line.
Loopback only; the machine's load shows in every figure: compare runs of one sitting.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from agent_client import Turn, chat_body, post
from agent_recorded import recorded
from agent_session import session
from peers import DEMO_ID, ROOT, restart_ours, rss_mib, start_llama_server, start_ours, stop

CHAT = "/v1/chat/completions"
LONG_CONTEXT = 32768  # the replayed agent sessions grow past 20k tokens on our side
REPLAY_MAX_TOKENS = 2
RESTART_PAUSE = 2.0  # seconds before the restart: a cache written off the engine thread lands
ONE_TOKEN_WORDS = (
    "the of and to in is that it for on with as was at by be this from or have an are not but "
    "had his they you were her she which one all their there been has when who will more no if "
    "out so said what up its about into than them can only other new some could time these two "
    "may then do first any my now such like our over man me even most made after also did many "
    "before must through back years where much your way well down should because each just "
    "those people how too little state good very make world still own see men work long get "
    "here between both life being under never day same another know while last might us great"
)  # each one token in SmolLM2's vocabulary, a space before it: N words, N tokens
WORDS = ONE_TOKEN_WORDS.split()
TOOL_RESULT = (
    "Tool result: ran the test suite for the parser module; 41 passed, 2 failed "
    "(test_nested_lists and test_unicode_keys), in 3.8 seconds. What should change next?"
)  # about 40 tokens
Servers = dict[str, tuple[subprocess.Popen, str]]


def filler(words: int, seed: int) -> str:
    """`words` one-token words, a different sequence per seed (so no two sizes share a prefix)."""
    draw = random.Random(seed)
    return " ".join(draw.choice(WORDS) for _ in range(words))


def sized_chat(size: int, tag: str) -> list[dict]:
    """A chat whose prompt is about `size` tokens, its first line unique to `tag`."""
    seed = sum(map(ord, tag)) * 7919 + size
    return [
        {"role": "system", "content": f"Session {tag}. Answer in one word."},
        {"role": "user", "content": filler(size - 40, seed) + "\nWhich word comes most often?"},
    ]


def fitting(size: int) -> int:
    """A sequence's context for prompts of `size` tokens and a short answer: whole kilotokens."""
    return -(-(size + 1024) // 1024) * 1024


def warm(url: str) -> None:
    """A tiny request first: the model loads (ours loads on its first request)."""
    post(url, CHAT, chat_body([{"role": "user", "content": "Hi"}], 1))


@contextmanager
def servers(
    folder: Path, args: argparse.Namespace, context: int, slots: int, jinja: bool
) -> Iterator[Servers]:
    """The servers --servers names, started (ours in `folder`, both with `context` tokens a
    sequence, llama-server with `slots` slots), warmed, and stopped whatever happens."""
    started: Servers = {}
    try:
        if "ours" in args.servers:
            process, url, _ = start_ours(args.gguf, folder, dict(os.environ), context)
            started["ours"] = (process, url)
        if "llama-server" in args.servers:
            started["llama-server"] = start_llama_server(
                args.gguf, slots, dict(os.environ), slot_context=context, jinja=jinja
            )
        for _, url in started.values():
            warm(url)
        yield started
    finally:
        for process, _ in started.values():
            stop(process)


def sized_turns(url: str, size: int, tag: str) -> tuple[Turn, Turn]:
    """One size's cold request and its next turn, back to back as an agent sends them."""
    messages = sized_chat(size, tag)
    cold = post(url, CHAT, chat_body(messages, 1))
    follow = [
        *messages,
        {"role": "assistant", "content": cold.text or "the"},
        {"role": "user", "content": TOOL_RESULT},
    ]
    return cold, post(url, CHAT, chat_body(follow, 1))


def run_sizes(args: argparse.Namespace, work: Path) -> None:
    context = fitting(max(args.sizes))
    results: dict[tuple[int, str], list[tuple[Turn, Turn]]] = {}
    with servers(work / "sizes", args, context, args.slots, jinja=False) as started:
        for repeat in range(args.repeat):
            for size in args.sizes:
                for name, (_, url) in started.items():
                    cold, follow = sized_turns(url, size, f"{repeat}-{os.getpid()}")
                    results.setdefault((size, name), []).append((cold, follow))
                    print(f"  {name} {size}: cold {cold.describe()}; next {follow.describe()}")
    print(f"\nCold prompt and its next turn ({args.repeat} run(s), medians):\n")
    print(sizes_table(args.sizes, args.servers, results))


def median(values: list[float | None]) -> float | None:
    found = [value for value in values if value is not None]
    return statistics.median(found) if found else None


def ratio(ours: float | None, peer: float | None) -> str:
    return f"{ours / peer:.2f}" if ours and peer else "-"


def sizes_table(sizes: list[int], names: list[str], results: dict) -> str:
    """One row per size: each server's cold and next turn, then ours/llama."""
    head = ["prompt"]
    for name in names:
        head += [f"{name} cold s (tok/s)", f"{name} next s (cached)"]
    both = {"ours", "llama-server"} <= set(names)
    head += ["cold ours/llama", "next ours/llama"] if both else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for size in sizes:
        cells, seconds = [], {}
        prompt = None
        for name in names:
            runs = results.get((size, name), [])
            cold = median([c.seconds for c, _ in runs])
            follow = median([f.seconds for _, f in runs])
            prompt = prompt or median([c.prompt for c, _ in runs])
            cached = median([f.cached for _, f in runs])
            speed = median([c.prompt / c.seconds for c, _ in runs if c.prompt and c.seconds])
            cells += [fmt(cold, speed, "tok/s"), fmt(follow, cached, "cached")]
            seconds[name] = (cold, follow)
        if both:
            cells += [ratio(seconds["ours"][i], seconds["llama-server"][i]) for i in (0, 1)]
        label = f"{prompt:,.0f} tokens" if prompt else f"~{size}"
        lines.append("| " + " | ".join([label, *cells]) + " |")
    return "\n".join(lines)


def fmt(seconds: float | None, extra: float | None, unit: str) -> str:
    if seconds is None:
        return "-"
    shown = f"{extra:,.0f}" if extra is not None else "?"
    return f"{seconds:.2f} ({shown}{' tok/s' if unit == 'tok/s' else ''})"


def run_replay(args: argparse.Namespace, work: Path) -> None:
    turns = session(args.replay, DEMO_ID, REPLAY_MAX_TOKENS)
    if args.no_tools:  # llama-server's SmolLM2 template drops them: prompts alike without
        turns = [(what, {k: v for k, v in body.items() if k != "tools"}) for what, body in turns]
    rows: list[tuple[str, dict[str, tuple[Turn, float | None]]]] = []
    with servers(work / "replay", args, LONG_CONTEXT, 1, jinja=True) as started:
        for number, (what, body) in enumerate(turns, 1):
            row = {}
            for name, (process, url) in started.items():
                turn = post(url, "/v1/messages", body)
                row[name] = (turn, rss_mib(process.pid))
                print(f"  turn {number} {name}: {turn.describe()}", flush=True)
            rows.append((what, row))
    without = ", tools left out" if args.no_tools else ""
    print(f"\nScripted Claude Code session, {args.replay} turns (Messages, streamed{without}):\n")
    print(replay_table(rows, args.servers))


def replay_table(rows: list, names: list[str]) -> str:
    head = ["turn", "adds"]
    for name in names:
        head += [f"{name} prompt (cached)", "TTFT s", "new tok/s", "RSS MiB"]
    both = {"ours", "llama-server"} <= set(names)
    head += ["TTFT ours/llama"] if both else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for number, (what, row) in enumerate(rows, 1):
        cells = [str(number), what]
        for name in names:
            turn, rss = row[name]
            cells += [*turn.replay_cells(), f"{rss:,.0f}" if rss else "-"]
        if both:
            cells.append(ratio(row["ours"][0].ttft, row["llama-server"][0].ttft))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_restart(args: argparse.Namespace, work: Path) -> None:
    """Ours: cold, next turn in memory, a restart on the same VAR_DIR, a follow-up."""
    size, folder, tag = args.restart_size, work / "restart", f"restart-{os.getpid()}"
    process, url, _ = start_ours(
        args.gguf, folder, dict(os.environ), -(-(size + 1024) // 1024) * 1024
    )
    try:
        warm(url)
        cold, follow = sized_turns(url, size, tag)
        rows = [("cold", cold, None), ("next turn, in memory", follow, rss_mib(process.pid))]
        time.sleep(RESTART_PAUSE)
    finally:
        stop(process)
    process, url = restart_ours(folder, dict(os.environ))
    try:
        hello = chat_body([{"role": "user", "content": "Hi"}], 1)
        rows.append(("first request after restart (loads the model)", post(url, CHAT, hello), None))
        # Another tool result than the in-memory turn's: only the shared prefix can be reused.
        follow_up = [
            *sized_chat(size, tag),
            {"role": "assistant", "content": cold.text or "the"},
            {"role": "user", "content": TOOL_RESULT.replace("41 passed", "43 passed")},
        ]
        after = post(url, CHAT, chat_body(follow_up, 1))
        rows.append(("follow-up after restart", after, rss_mib(process.pid)))
    finally:
        stop(process)
    print(f"\nOurs, a {cold.prompt or size:,}-token prompt, restarted between turns:\n")
    print("| turn | seconds | cached tokens | RSS MiB after |\n|---|---|---|---|")
    for what, turn, rss in rows:
        print(f"| {what} | {turn.seconds:.2f} | {turn.cached} | {f'{rss:,.0f}' if rss else ''} |")
    print(f"\nafter restart / in memory: {ratio(after.seconds, follow.seconds)}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--gguf", type=Path, default=ROOT / "var/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    parser.add_argument("--servers", default="ours,llama-server", type=lambda v: v.split(","))
    parser.add_argument("--sizes", type=lambda v: [int(s) for s in v.split(",")])
    parser.add_argument("--replay", type=int, nargs="?", const=8, metavar="N")
    parser.add_argument(
        "--no-tools", action="store_true", help="--replay without the tools' schemas"
    )
    parser.add_argument("--restart", action="store_true")
    parser.add_argument("--restart-size", type=int, default=5000)
    parser.add_argument("--recorded", action="store_true")
    parser.add_argument("--slots", type=int, default=4, help="llama-server's slots (--sizes)")
    parser.add_argument("--repeat", type=int, default=1, help="--sizes runs, medians shown")
    args = parser.parse_args()
    args.servers = ["llama-server" if name == "llama" else name for name in args.servers]
    unknown = set(args.servers) - {"ours", "llama-server"}
    if unknown:
        parser.error(f"unknown servers: {', '.join(sorted(unknown))}")
    if not (args.sizes or args.replay or args.restart or args.recorded):
        args.sizes = [512, 2048, 5000, 8000]
    return args


def main() -> None:
    args = parse_args()
    modes: list[Callable[[argparse.Namespace, Path], None]] = []
    modes += [run_sizes] if args.sizes else []
    modes += [run_replay] if args.replay else []
    modes += [run_restart] if args.restart else []
    with tempfile.TemporaryDirectory() as work:
        for mode in modes:
            mode(args, Path(work))
        if args.recorded:
            with servers(Path(work) / "recorded", args, LONG_CONTEXT, 1, True) as up:
                recorded({name: url for name, (_, url) in up.items()})


if __name__ == "__main__":
    main()
