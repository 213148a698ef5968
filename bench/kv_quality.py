"""What each KV cache format costs in quality and saves in memory, on the demo model.

    .venv/bin/python bench/kv_quality.py [--gguf var/cache/SmolLM2-135M-Instruct.Q4_1.gguf]

A fixed English text (below: the opening of Jane Austen's *Pride and Prejudice*, 1813, public
domain) is teacher-forced through the model in chunks of 64 tokens, as prefill reads a prompt:
each chunk's K/V is stored in the format under test (engine/kv.py) and every later position
attends to the stored, converted K/V. Over the text's last 500 positions: top-1 agreement of
the next-token predictions with float32 K/V and with float16 K/V, and perplexity; then the
KV bytes per token each format keeps (llama.cpp's f16 for comparison).

Measured here (Linux CPU, 2 cores; the demo SmolLM2-135M Q4_1 computing in its stored format
with the CPU kernels, whose attention reads float16 and quantized K/V in place; 765 tokens of
text, predictions at positions 264-763):

| KV format | bytes/token | vs float16 | top-1 vs float32 | top-1 vs float16 | perplexity |
|---|---|---|---|---|---|
| float32 | 46,080 | 200.0% | 100.0% | 100.0% | 19.12 |
| float16 | 23,040 | 100.0% | 100.0% | 100.0% | 19.12 |
| 8bit | 12,240 | 53.1% | 99.0% | 99.0% | 19.10 |
| 4bit | 6,480 | 28.1% | 81.2% | 81.2% | 20.87 |

llama.cpp's f16 KV for this model: 23,040 bytes/token (float16 here is the same). The 5
predictions 8-bit changes are near-ties (float16's top-1 ahead of its second by at most 0.027
nats). Through MLX's own quantized attention (before the kernel read 8-bit K/V) it was 98.6%:
7 flips, all within 0.15 nats. 4-bit flips 94, some clear (1.8 nats).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inference import blas

blas.preload()  # before MLX is imported, as the server's settings do

from profile import load_demo  # noqa: E402  (bench/profile.py: bench/ is on the path)

import mlx.core as mx  # noqa: E402

from inference.engine.kv import NATIVE, KVFormat  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CHUNK = 64  # prefill's chunk: later chunks attend to K/V as stored
POSITIONS = 500
KINDS = {"float32": NATIVE, "float16": "float16", "8bit": "8bit", "4bit": "4bit"}

TEXT = """\
It is a truth universally acknowledged, that a single man in possession of a good fortune, \
must be in want of a wife.

However little known the feelings or views of such a man may be on his first entering a \
neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he \
is considered the rightful property of some one or other of their daughters.

"My dear Mr. Bennet," said his lady to him one day, "have you heard that Netherfield Park is \
let at last?"

Mr. Bennet replied that he had not.

"But it is," returned she; "for Mrs. Long has just been here, and she told me all about it."

Mr. Bennet made no answer.

"Do you not want to know who has taken it?" cried his wife impatiently.

"You want to tell me, and I have no objection to hearing it."

This was invitation enough.

"Why, my dear, you must know, Mrs. Long says that Netherfield is taken by a young man of large \
fortune from the north of England; that he came down on Monday in a chaise and four to see \
the place, and was so much delighted with it, that he agreed with Mr. Morris immediately; \
that he is to take possession before Michaelmas, and some of his servants are to be in the \
house by the end of next week."

"What is his name?"

"Bingley."

"Is he married or single?"

"Oh! Single, my dear, to be sure! A single man of large fortune; four or five thousand a \
year. What a fine thing for our girls!"

"How so? How can it affect them?"

"My dear Mr. Bennet," replied his wife, "how can you be so tiresome! You must know that I am \
thinking of his marrying one of them."

"Is that his design in settling here?"

"Design! Nonsense, how can you talk so! But it is very likely that he may fall in love with \
one of them, and therefore you must visit him as soon as he comes."

"I see no occasion for that. You and the girls may go, or you may send them by themselves, \
which perhaps will be still better, for as you are as handsome as any of them, Mr. Bingley \
may like you the best of the party."

"My dear, you flatter me. I certainly have had my share of beauty, but I do not pretend to \
be anything extraordinary now. When a woman has five grown-up daughters, she ought to give \
over thinking of her own beauty."

"In such cases, a woman has not often much beauty to think of."

"But, my dear, you must indeed go and see Mr. Bingley when he comes into the neighbourhood."

"It is more than I engage for, I assure you."

"But consider your daughters. Only think what an establishment it would be for one of them. \
Sir William and Lady Lucas are determined to go, merely on that account, for in general, you \
know, they visit no newcomers. Indeed you must go, for it will be impossible for us to visit \
him if you do not."

"You are over-scrupulous, surely. I dare say Mr. Bingley will be very glad to see you; and I \
will send a few lines by you to assure him of my hearty consent to his marrying whichever he \
chooses of the girls; though I must throw in a good word for my little Lizzy."
"""


def teacher_forced(model, tokens: list[int], kind: str) -> tuple[mx.array, int]:
    """Log-probabilities of every next token, read chunk by chunk into a cache of `kind`,
    and the KV bytes the cache holds for the text."""
    cache = KVFormat(model, kind).make()
    rows = []
    for start in range(0, len(tokens), CHUNK):
        chunk = mx.array(tokens[start : start + CHUNK], dtype=mx.uint32)[None]
        logits = model(chunk, cache=cache)[0].astype(mx.float32)
        rows.append(logits - mx.logsumexp(logits, axis=-1, keepdims=True))
        mx.eval(rows[-1], [layer.state for layer in cache])
    return mx.concatenate(rows), sum(held_bytes(layer) for layer in cache)


def held_bytes(layer) -> int:
    """Bytes of the positions a layer holds (not its preallocated room)."""
    keys, values = layer.keys_and_values()
    parts = [*keys, *values] if isinstance(keys, tuple) else [keys, values]
    return sum(p.nbytes for p in parts)


def f16_bytes_per_token(model) -> int:
    """What llama.cpp's f16 KV takes: 2 bytes per K and V value of every layer."""
    cache = KVFormat(model, "float16").make()
    model(mx.array([[1]], dtype=mx.uint32), cache=cache)
    return sum(held_bytes(layer) for layer in cache)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--gguf", type=Path, default=ROOT / "var/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kv-quality-") as workdir:
        loaded = load_demo(args.gguf, Path(workdir))
        tokens = list(loaded.tokenizer.encode(TEXT))
        assert len(tokens) > POSITIONS + CHUNK, len(tokens)
        span = slice(len(tokens) - 1 - POSITIONS, len(tokens) - 1)  # predictions scored
        targets = mx.array(tokens[span.start + 1 : span.stop + 1])
        print(
            f"{loaded.spec.model_id}: computing in {loaded.compute_format}"
            f"{' with the CPU kernels' if loaded.kernels else ''}, device {mx.default_device()}; "
            f"{len(tokens)} tokens, predictions at positions {span.start}-{span.stop - 1}\n"
        )
        results = {}
        for name, kind in KINDS.items():
            logprobs, nbytes = teacher_forced(loaded.model, tokens, kind)
            logprobs = logprobs[span]
            nll = -mx.take_along_axis(logprobs, targets[:, None], axis=-1).mean().item()
            top = logprobs.argmax(axis=-1)
            results[name] = (top, nbytes / len(tokens), math.exp(nll), logprobs)
        table(results)
        f16 = f16_bytes_per_token(loaded.model)
        print(f"\nllama.cpp's f16 KV for this model: {f16:,} bytes/token.")


def table(results: dict[str, tuple[mx.array, float, float, mx.array]]) -> None:
    def agreement(a: mx.array, b: mx.array) -> str:
        return f"{(a == b).astype(mx.float32).mean().item():.1%}"

    top32, top16, f16 = results["float32"][0], results["float16"][0], results["float16"][1]
    ranked = mx.sort(results["float16"][3], axis=-1)
    margins = ranked[:, -1] - ranked[:, -2]  # float16's top-1 lead over its second, in nats
    print("| KV format | bytes/token | vs float16 | top-1 vs float32 | top-1 vs float16 ", end="")
    print("| perplexity |")
    print("|---|---|---|---|---|---|")
    for name, (top, per_token, ppl, _) in results.items():
        print(
            f"| {name} | {per_token:,.0f} | {per_token / f16:.1%} | {agreement(top, top32)} "
            f"| {agreement(top, top16)} | {ppl:.2f} |"
        )
    print("\nWhere a format's top-1 differs from float16's, float16's lead there (nats):")
    for name, (top, *_) in results.items():
        leads = sorted(
            m for m, d in zip(margins.tolist(), (top != top16).tolist(), strict=True) if d
        )
        if leads:
            print(f"  {name}: {len(leads)} positions, largest lead {leads[-1]:.3f}")


if __name__ == "__main__":
    main()
