"""How soon a started server answers: `manage.py serve` until /v1/models answers, then the first
chat request (which loads the model), on a fresh var/ and after a restart on the same one.

    .venv/bin/python bench/ready.py [--gguf FILE] [--rounds 3]

The GGUF (the demo's by default; any file `import_gguf` takes, such as a real-width one) is
imported once. Each round starts ours on a copy of that install's var/ with nothing measured
yet (a first start), then restarts it on the same var/ (what a later start finds there: the
compute format measured, if it was). Medians of the rounds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from peers import DEMO_ID, ROOT, bench_env, serve_ours, start_ours, stop

DEMO_GGUF = ROOT / "var/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
CHAT = {"model": DEMO_ID, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}


def one_start(workdir: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """(seconds to /v1/models, seconds of the first chat request, the model's format reason)."""
    env = bench_env(workdir, env)
    started = time.monotonic()
    process, url = serve_ours(ROOT, env, "/v1/models")
    up = time.monotonic() - started
    try:
        started = time.monotonic()
        response = httpx.post(f"{url}/v1/chat/completions", json=CHAT, timeout=600)
        response.raise_for_status()
        first = time.monotonic() - started
        headers = {"Authorization": f"Bearer {env['ADMIN_TOKEN']}"}
        pool = httpx.get(f"{url}/control/pool", headers=headers, timeout=30).json()
        reasons = [m["format_reason"] for m in pool["models"] if m["id"] == DEMO_ID]
    finally:
        stop(process)
    return up, first, reasons[0] if reasons else "(not loaded)"


def verdicts_in(workdir: Path) -> dict[str, str]:
    return {"COMPUTE_FORMAT_VERDICTS": str(workdir / "compute-formats.json")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, default=DEMO_GGUF)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    # Each round's verdicts in its own var/, whatever the shell or a .env file says.
    env = {**os.environ, "COMPUTE_FORMAT_VERDICTS": ""}
    with tempfile.TemporaryDirectory(prefix="bench-ready-") as scratch:
        installed = Path(scratch) / "installed"
        process, _, _ = start_ours(args.gguf, installed, env)
        stop(process)
        (installed / "compute-formats.json").unlink(missing_ok=True)
        rows: dict[str, list[tuple[float, float]]] = {"first start": [], "restart": []}
        reasons: dict[str, set[str]] = {kind: set() for kind in rows}
        for round_ in range(args.rounds):
            workdir = Path(scratch) / f"round-{round_}"
            shutil.copytree(installed, workdir)
            for kind in rows:
                up, first, reason = one_start(workdir, env | verdicts_in(workdir))
                reasons[kind].add(reason)
                rows[kind].append((up, first))
                print(f"round {round_ + 1} {kind}: up {up:.1f} s, first request {first:.1f} s")
                sys.stdout.flush()
            shutil.rmtree(workdir)
    print(f"\n{args.gguf.name}, medians of {args.rounds} rounds")
    print("| start | serve → /v1/models | first request (loads the model) | sum | format |")
    print("|---|---|---|---|---|")
    for kind, times in rows.items():
        up = statistics.median(t[0] for t in times)
        first = statistics.median(t[1] for t in times)
        said = " / ".join(sorted(reasons[kind]))
        print(f"| {kind} | {up:.1f} s | {first:.1f} s | {up + first:.1f} s | {said} |")


if __name__ == "__main__":
    main()
