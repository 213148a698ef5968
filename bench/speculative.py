"""Speculative decoding in-process: a code edit (a file in the prompt, written back with a
rename) decoded greedily with and without n-gram drafts, on the demo model as the server runs it.

    .venv/bin/python bench/speculative.py [--streams 1,8] [--tokens 256] [--repeats 3] \
        [--draft-layers 8] [--draft-model DIR] [--hybrid] [--mtp]

With --hybrid the model is the demo grafted into Granite 4's hybrid layout
(tests/support/grafted.py: its layers as the attention ones, a Mamba-2 layer of random weights
after every second one), so that a model with recurrent state answers the edit for real: its
drafts replay rejections.

With --mtp the model is tests/support/mtp_models.py's Qwen3.5-shaped hybrid trained with an MTP head
(trained once per machine, about a minute), asked to continue walks along the cycle it learnt
(each stream from its own place); it also runs `speculative: mtp`. Its head is a layer and the
output head beside a model of two layers, so tokens per step say more than tokens/s do: on a
model of real size the head costs a few percent of a step.

With --draft-layers N it also runs `speculative: draft_model` with a draft model made of the
demo model's first N layers (its own norm and head: a layer-skip self-draft, untrained for it);
with --draft-model DIR, that model (same vocabulary) instead.

For each stream count it fills a ModelRunner with that many copies of the request (each a
file of its own, so no two rows share a prompt), reads the prompts, then times decoding alone
(from every row's first token to the last row's end), alternating the two modes so that both
see the same machine. It prints tokens/s (median over repeats), the drafts' acceptance, and
whether the greedy answers were token-identical in both modes.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inference import blas

blas.preload()  # before MLX is imported, as the server's settings do

from bench.profile import load_demo  # noqa: E402
from inference.adapters import FamilyProfile, get_adapter  # noqa: E402
from inference.engine.batching import ModelRunner  # noqa: E402
from inference.engine.config import EngineConfig  # noqa: E402
from inference.engine.pool import LoadedModel, ModelPool  # noqa: E402
from inference.engine.sequence import Sequence  # noqa: E402
from inference.engine.types import (  # noqa: E402
    GenerationJob,
    ModelSpec,
    SamplingParams,
    TokenPrompt,
)

ROOT = Path(__file__).resolve().parent.parent


def source_file(variant: int, functions: int = 12) -> str:
    """A few hundred lines of plain Python that uses `total_price` throughout."""
    parts = [f'"""Orders, module {variant}."""\n\nfrom dataclasses import dataclass\n']
    for i in range(functions):
        parts.append(
            f"""
@dataclass
class Line{i}:
    name: str
    quantity: int
    unit_price: float


def total_price_{i}(lines: list[Line{i}], discount: float = {i / 100:.2f}) -> float:
    \"\"\"The order's total_price after a discount of {i} percent.\"\"\"
    total_price = 0.0
    for line in lines:
        total_price += line.quantity * line.unit_price
    if total_price > {100 + 10 * i + variant}:
        total_price = total_price * (1 - discount)
    return round(total_price, 2)
"""
        )
    return "".join(parts)


def prompt_of(loaded: LoadedModel, variant: int) -> tuple[tuple[int, ...], frozenset[int]]:
    adapter = get_adapter(FamilyProfile(adapter="chatml"))
    ask = (
        "Rename the variable total_price to order_total everywhere in this file and return "
        f"the whole file, with no explanation.\n\n```python\n{source_file(variant)}```"
    )
    messages = [{"role": "user", "content": ask}]
    ids = adapter.render_prompt(loaded.tokenizer, messages)
    # The answer's opening, as an agent's prefill would give it: a model this small would
    # otherwise describe the file rather than write it back.
    opening = "```python\n" + source_file(variant).split("\n@dataclass")[0]
    ids = [*ids, *loaded.tokenizer.encode(opening, add_special_tokens=False)]
    return tuple(ids), adapter.stop_token_ids(loaded.tokenizer)


def cycle_walk(loaded: LoadedModel, variant: int) -> tuple[tuple[int, ...], frozenset[int]]:
    """A walk along the trained MTP model's cycle, from a place of its own (--mtp)."""
    from tests.support.mtp_models import cycle_prompt

    return tuple(cycle_prompt(7 * variant, 16)), frozenset()


def decode(loaded: LoadedModel, streams: int, params: SamplingParams, prompts=prompt_of) -> dict:
    runner = ModelRunner(loaded, EngineConfig(max_batch=max(streams, 1), prompt_cache_bytes=0))
    sequences = []
    for i in range(streams):
        ids, stops = prompts(loaded, i)
        job = GenerationJob(loaded.spec, TokenPrompt(ids), params, lambda e: None, stop_ids=stops)
        sequences.append(Sequence(job, loaded))
        runner.add(sequences[-1])
    while any(s.first_token_at is None for s in sequences):
        runner.step()
    before = sum(s.completion_tokens for s in sequences)
    stats = runner.speculation
    drafted, accepted, replays = stats.drafted, stats.accepted, stats.replays
    started = time.perf_counter()
    steps = 0
    while not all(s.finished for s in sequences):
        runner.step()
        steps += 1
    seconds = time.perf_counter() - started
    tokens = sum(s.completion_tokens for s in sequences) - before
    return {
        "tok_s": tokens / seconds,
        "tokens": tokens,
        "steps": steps,
        "drafted": stats.drafted - drafted,
        "accepted": stats.accepted - accepted,
        "replays": stats.replays - replays,
        "answers": [s.fed[1 : s.completion_tokens] for s in sequences],
    }


def first_layers(source: Path, destination: Path, layers: int) -> Path:
    """A copy of an mlx-lm model folder keeping its first `layers` decoder layers."""
    import mlx.core as mx

    shutil.copytree(source, destination, ignore=shutil.ignore_patterns("*.safetensors"))
    config = json.loads((destination / "config.json").read_text())
    config["num_hidden_layers"] = layers
    (destination / "config.json").write_text(json.dumps(config))
    weights = {}
    for path in source.glob("*.safetensors"):
        for name, value in mx.load(str(path)).items():
            layer = re.search(r"\.layers\.(\d+)\.", name)
            if layer is None or int(layer.group(1)) < layers:
                weights[name] = value
    mx.save_safetensors(str(destination / "model.safetensors"), weights)
    return destination


def with_draft(loaded: LoadedModel, args: argparse.Namespace, workdir: Path) -> LoadedModel:
    """The demo model loaded again, with the draft model --draft-layers/--draft-model name."""
    source = Path(loaded.spec.location)
    folder = args.draft_model or first_layers(source, workdir / "draft", args.draft_layers)
    draft = ModelSpec(model_id="draft", location=str(folder))
    return ModelPool(16 * 2**30).get(
        ModelSpec(model_id="demo-drafted", location=str(source), draft=draft)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--gguf", type=Path, default=ROOT / "var/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    parser.add_argument("--streams", default="1,8")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--draft", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--draft-layers", type=int, default=0, help="a draft of the first N")
    parser.add_argument("--draft-model", type=Path, help="a draft model folder")
    parser.add_argument("--hybrid", action="store_true", help="the demo with Mamba-2 layers")
    parser.add_argument("--mtp", action="store_true", help="a hybrid trained with an MTP head")
    args = parser.parse_args()
    modes = {
        "off": SamplingParams(temperature=0, max_tokens=args.tokens),
        "ngram": SamplingParams(
            temperature=0, max_tokens=args.tokens, speculative="ngram", draft_tokens=args.draft
        ),
    }
    with tempfile.TemporaryDirectory(prefix="speculative-") as workdir:
        loaded = load_demo(args.gguf, Path(workdir))
        if args.hybrid:
            from tests.support.grafted import grafted

            folder = grafted(Path(loaded.spec.location), Path(workdir) / "hybrid")
            loaded = ModelPool(16 * 2**30).get(ModelSpec(model_id="hybrid", location=str(folder)))
        prompts = prompt_of
        if args.mtp:
            from tests.support.mtp_models import trained_once

            folder = trained_once(Path(loaded.spec.location))
            loaded = ModelPool(16 * 2**30).get(ModelSpec(model_id="mtp", location=str(folder)))
            modes["mtp"] = replace(modes["ngram"], speculative="mtp")
            prompts = cycle_walk
        print(f"{loaded.spec.model_id}: {loaded.compute_format}, draft {args.draft}")
        models = dict.fromkeys(modes, loaded)
        if args.draft_layers or args.draft_model:
            models["draft_model"] = with_draft(loaded, args, Path(workdir))
            modes["draft_model"] = replace(modes["ngram"], speculative="draft_model")
        for streams in [int(s) for s in args.streams.split(",")]:
            results: dict[str, list[dict]] = {mode: [] for mode in modes}
            for _ in range(args.repeats):
                for mode, params in modes.items():
                    results[mode].append(decode(models[mode], streams, params, prompts))
            report(streams, results)


def report(streams: int, results: dict[str, list[dict]]) -> None:
    for mode, runs in results.items():
        rates = sorted(r["tok_s"] for r in runs)
        last = runs[-1]
        rate = last["accepted"] / last["drafted"] if last["drafted"] else 0.0
        print(
            f"streams {streams:>2} {mode:<11} {statistics.median(rates):7.1f} tok/s "
            f"(runs {', '.join(f'{r:.1f}' for r in rates)})  tokens {last['tokens']} "
            f"steps {last['steps']} ({last['tokens'] / last['steps'] / streams:.2f} a row) "
            f" drafted {last['drafted']} accepted {last['accepted']} "
            f"({rate:.0%}) replays {last['replays']}"
        )
    for mode in [m for m in results if m != "off"]:
        pairs = zip(results["off"], results[mode], strict=True)
        ratios = sorted(b["tok_s"] / a["tok_s"] for a, b in pairs)
        print(
            f"streams {streams:>2} {mode}/off, adjacent pairs: median "
            f"{statistics.median(ratios):.2f}x ({', '.join(f'{r:.2f}' for r in ratios)})"
        )
        same = results["off"][-1]["answers"] == results[mode][-1]["answers"]
        print(f"streams {streams:>2} greedy answers identical with {mode} and without: {same}")


if __name__ == "__main__":
    main()
