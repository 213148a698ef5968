"""What an MTP guess costs at a real width, against the step it saves.

    .venv/bin/python bench/mtp_cost.py [--hidden 2048] [--layers 8] [--of-layers 24] \
        [--vocab 151936] [--bits 4] [--streams 1,8]

Builds a random-weight Qwen3.5-shaped hybrid of that width (its gated-delta and attention layers
3:1, `--layers` of them) with a random MTP head in its checkpoint's layout, quantized as mlx-lm
quantizes, loads it as the server does (CPU kernels where they apply), and times on rows whose
prompts are read: a plain step, a verification of 5 positions a row (4 guesses), and the MTP
batch's read of one position a row plus 3 chained guesses. Random weights keep no guess, so
this measures cost only; with each guess kept with probability p, a step of 4 guesses yields
(1 - p^5) / (1 - p) tokens a row, and the expected speedup over plain steps is printed for a
few p, with the layer stack scaled from `--layers` to `--of-layers` (the head's cost does not
grow with depth). A replay after a rejection (rewind.py) is not counted: expect less.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inference import blas

blas.preload()  # before MLX is imported, as the server's settings do

import mlx.core as mx  # noqa: E402

from bench.profile import load_demo  # noqa: E402
from inference.engine.batching import ModelRunner  # noqa: E402
from inference.engine.config import EngineConfig  # noqa: E402
from inference.engine.pool import ModelPool  # noqa: E402
from inference.engine.types import ModelSpec, SamplingParams  # noqa: E402
from tests.engine.jobs import make_sequence  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def shape(args: argparse.Namespace) -> dict:
    """A Qwen3.5 config of the asked width and depth."""
    heads = args.hidden // 256
    text = {
        "model_type": "qwen3_5_text",
        "hidden_size": args.hidden,
        "num_hidden_layers": args.layers,
        "intermediate_size": 3 * args.hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "rms_norm_eps": 1e-6,
        "vocab_size": args.vocab,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 16,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "full_attention_interval": 4,
        "tie_word_embeddings": False,
        "max_position_embeddings": 32768,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 1e7,
            "partial_rotary_factor": 0.25,
            "mrope_section": [11, 11, 10],
        },
    }
    return {"model_type": "qwen3_5", "text_config": text}


def build(args: argparse.Namespace, tokenizer: Path, folder: Path) -> Path:
    import mlx.nn as nn
    from mlx.utils import tree_flatten
    from mlx_lm.utils import save_config

    from inference.engine.mtp.families import family_of
    from inference.engine.mtp.head import MtpHead, split
    from tests.support.mtp_models import _model

    folder.mkdir(parents=True)
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer / file, folder / file)
    config = shape(args)
    model = _model(config)
    args_ = model.language_model.args
    family = family_of("qwen3_5")
    head = MtpHead(family.block(split(model).body, args_), args.hidden, 1e-6, family)
    quantize = {"group_size": 64, "bits": args.bits}
    nn.quantize(model, **quantize)
    nn.quantize(head, **quantize, class_predicate=lambda p, m: hasattr(m, "to_quantized"))
    config["quantization"] = quantize
    mx.save_safetensors(str(folder / "model.safetensors"), dict(tree_flatten(model.parameters())))
    names = {
        "embed_norm": "mtp.pre_fc_norm_embedding",
        "hidden_norm": "mtp.pre_fc_norm_hidden",
        "proj": "mtp.fc",
        "norm": "mtp.norm",
    }
    weights = {}
    for path, value in tree_flatten(head.parameters()):
        role, _, rest = path.partition(".")
        weights[f"mtp.layers.0.{rest}" if role == "block" else f"{names[role]}.{rest}"] = value
    mx.save_safetensors(str(folder / "model-mtp.safetensors"), weights)
    save_config(config, folder / "config.json")
    return folder


def timed(work, repeats: int = 7) -> float:
    work()  # warm
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def measure(loaded, streams: int) -> dict[str, float]:
    runner = ModelRunner(loaded, EngineConfig(max_batch=streams, prompt_cache_bytes=0))
    params = SamplingParams(temperature=0, max_tokens=10_000, speculative="mtp", draft_tokens=4)
    rows = [
        make_sequence(loaded, [1000 + i + j for j in range(256)], params) for i in range(streams)
    ]
    for row in rows:
        runner.add(row)
    while any(r.first_token_at is None for r in rows):
        runner.step()
    batch = runner._decode
    cache, target = batch.cache, loaded.mtp.target

    def forward(width: int):
        def run():
            tokens = mx.zeros((streams, width), dtype=mx.uint32)
            logits, hidden = target(tokens, cache)
            mx.eval(logits, hidden)
            for layer in cache:  # K/V back to where it was (state layers just move on)
                if layer.is_trimmable():
                    layer.trim(width)

        return run

    group = next(iter(batch._groups.values()), None) or type(rows[0].drafter).group(rows[0].drafter)
    drafters = [r.drafter for r in rows]
    hidden = mx.zeros((1, loaded.mtp.head.proj.weight.shape[0]))

    def guesses():
        for d in drafters:
            d.read(hidden, [1000])
        group.propose(drafters, [4] * streams)

    return {"plain": timed(forward(1)), "verify5": timed(forward(5)), "mtp4": timed(guesses)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--gguf", type=Path, default=ROOT / "var/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--of-layers", type=int, default=24)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--bits", type=int, default=4)
    parser.add_argument("--streams", default="1,8")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mtp-cost-") as workdir:
        demo = load_demo(args.gguf, Path(workdir))
        folder = build(args, Path(demo.spec.location), Path(workdir) / "wide")
        loaded = ModelPool(32 * 2**30).get(ModelSpec(model_id="wide", location=str(folder)))
        print(
            f"{args.layers} of {args.of_layers} layers, width {args.hidden}, vocab {args.vocab},"
            f" {args.bits}-bit, {loaded.compute_format}; head: {loaded.mtp_reason}"
        )
        for streams in (int(s) for s in args.streams.split(",")):
            t = measure(loaded, streams)
            scale = args.of_layers / args.layers  # the stack's share grows with depth
            plain, verify = t["plain"] * scale, t["verify5"] * scale
            print(
                f"streams {streams}: plain {t['plain'] * 1e3:.1f} ms, verify5 "
                f"{t['verify5'] * 1e3:.1f} ms, MTP read + 4 guesses {t['mtp4'] * 1e3:.1f} ms "
                f"(at {args.layers} layers)"
            )
            for p in (0.6, 0.8, 0.9):
                tokens = (1 - p**5) / (1 - p)
                speedup = tokens * plain / (verify + t["mtp4"])
                print(
                    f"  p={p}: {tokens:.2f} tokens a step, {speedup:.2f}x plain steps at "
                    f"{args.of_layers} layers"
                )


if __name__ == "__main__":
    main()
