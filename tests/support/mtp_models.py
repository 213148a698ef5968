"""Models with MTP heads for the tests: tiny architectures of the families that ship them, with a
head written as their real checkpoints name it (random weights), and one whose head is trained
here so that its guesses are right (a Qwen3.5-shaped hybrid on a corpus with learnable
structure).

The random heads' blocks are written in the checkpoint's own form where it differs from
mlx-lm's (routed experts one by one, which the family's sanitize stacks), so reading them
takes the path a downloaded checkpoint takes.
"""

from __future__ import annotations

import importlib
import json
import random
import shutil
from pathlib import Path
from typing import Any

from tests.support.architectures import ARCHITECTURES, BASE, _instantiate, _vocab_size, _with_vocab

# The matrix's architectures of families that ship MTP heads (tests/support/architectures.py), and
# MiMo (not in the matrix: its layers are Qwen2's).
MTP_ARCHS = ("qwen3_5", "qwen3_5_moe", "qwen3_next", "glm4_moe", "glm4_moe_lite", "mimo")
MIMO = {**BASE, "model_type": "mimo", "num_hidden_layers": 2, "num_nextn_predict_layers": 1}


def build_float(name: str, tokenizer_source: Path, folder: Path, seed: int = 0) -> Path:
    """A float model folder of the architecture `name` (as the matrix builds them)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.utils import save_config

    folder.mkdir(parents=True)
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_source / file, folder / file)
    config = MIMO if name == "mimo" else ARCHITECTURES[name].config
    config = _with_vocab(config, _vocab_size(tokenizer_source))
    mx.random.seed(seed)
    model = _instantiate(config)
    weights = dict(tree_flatten(model.parameters()))
    if name in UNCONVERTED:
        weights = checkpoint_form(weights, config["model_type"])
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})
    save_config(config, folder / "config.json")
    return folder


# Written as the downloaded checkpoint is: mlx-lm drops Qwen3-Next's head only from one.
UNCONVERTED = ("qwen3_next",)


def with_random_head(name: str, tokenizer_source: Path, tmp_path_factory, seed: int = 3) -> Path:
    """A copy of the matrix's float `name` with a random MTP head in its checkpoint's layout
    (in a weight file of its own, as sharded checkpoints keep it)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    from inference.engine.mtp.families import family_of
    from inference.engine.mtp.head import MtpHead, split

    folder = build_float(name, tokenizer_source, tmp_path_factory.mktemp("mtp") / name)
    config = json.loads((folder / "config.json").read_text())
    model = _model(config)
    args = getattr(model, "language_model", model).args
    family = family_of(config["model_type"])
    mx.random.seed(seed)
    target = split(model)
    head = MtpHead(family.block(target.body, args), args.hidden_size, args.rms_norm_eps, family)
    parts = family.parts(args, 0)
    own = {
        "embed_norm": parts.embed_norm,
        "hidden_norm": parts.hidden_norm,
        "proj": parts.proj,
        "norm": parts.final_norm,
    }
    block, weights = {}, {}
    for path, value in tree_flatten(head.parameters()):
        role, _, rest = path.partition(".")
        if role == "block":
            block[rest] = value
        else:
            weights[f"{own[role]}.{rest}"] = value
    for key, value in checkpoint_form(block, config["model_type"]).items():
        weights[parts.block + key] = value
    mx.save_safetensors(str(folder / "model-mtp.safetensors"), weights)
    return folder


def checkpoint_form(weights: dict[str, Any], model_type: str) -> dict[str, Any]:
    """Parameters as the family's checkpoints store them: routed experts one by one, or
    (Qwen3.5-MoE) gate and up fused per layer."""
    out: dict[str, Any] = {}
    for path, value in weights.items():
        if ".switch_mlp." not in path:
            out[path] = value
            continue
        before, after = path.split(".switch_mlp.")
        if model_type == "qwen3_5_moe":
            out.setdefault(f"{before}.experts.parts", {})[after] = value
        else:
            out.update((f"{before}.experts.{e}.{after}", value[e]) for e in range(len(value)))
    for key in [k for k in out if k.endswith(".experts.parts")]:
        import mlx.core as mx

        parts, before = out.pop(key), key[: -len(".parts")]
        gate, up = parts["gate_proj.weight"], parts["up_proj.weight"]
        out[f"{before}.gate_up_proj"] = mx.concatenate([gate, up], axis=-2)
        out[f"{before}.down_proj"] = parts["down_proj.weight"]
    return out


def _model(config: dict) -> Any:
    module = importlib.import_module(f"mlx_lm.models.{config['model_type']}")
    return module.Model(module.ModelArgs.from_dict(config))


# The trained model: one cycle through CYCLE token ids (a fixed random order), so the token
# after each is known from it alone and the one after that from the next; the head learns
# the latter from the model's hidden state and the next token's embedding.
CYCLE = 64
FIRST_ID = 1000  # ids from here: ordinary word pieces of SmolLM2's vocabulary


def cycle_order(seed: int = 11) -> list[int]:
    ids = list(range(FIRST_ID, FIRST_ID + CYCLE))
    random.Random(seed).shuffle(ids)
    return ids


def cycle_prompt(start: int, length: int) -> list[int]:
    order = cycle_order()
    return [order[(start + i) % CYCLE] for i in range(length)]


def trained_mtp_model(tokenizer_source: Path, destination: Path, steps: int = 160) -> Path:
    """The matrix's Qwen3.5 hybrid (a gated-delta layer and a full-attention one) trained
    with an MTP head on walks along the cycle: the model learns the next token, the head the
    one after. Written as a checkpoint: the model in mlx-lm's layout, the head as Qwen3.5's
    `mtp.*` (its own weight file)."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten

    from inference.engine.cpu.status import suspended
    from inference.engine.mtp.families import family_of
    from inference.engine.mtp.head import MtpHead, split

    build_float("qwen3_5", tokenizer_source, destination)
    config = json.loads((destination / "config.json").read_text())
    mx.random.seed(5)
    model = _model(config)
    args = model.language_model.args
    family = family_of("qwen3_5")
    target = split(model)
    head = MtpHead(family.block(target.body, args), args.hidden_size, args.rms_norm_eps, family)
    both = nn.Module()
    both.model, both.head = model, head

    # The softmax over the cycle's ids and as many others (the whole vocabulary's would
    # cost most of the minute): the others are pushed down, the rest stay small and random.
    shown = mx.arange(FIRST_ID, FIRST_ID + 8 * CYCLE)

    def loss(both: nn.Module, walks: mx.array) -> mx.array:
        rows = both.model.language_model.lm_head.weight[shown]
        labels = walks - FIRST_ID  # the cycle's ids come first in `shown`
        hidden = both.model.model(walks)
        main = nn.losses.cross_entropy(hidden[:, :-1] @ rows.T, labels[:, 1:]).mean()
        _, out = both.head(hidden[:, :-1], target.embed(walks[:, 1:]), None)
        ahead = nn.losses.cross_entropy(out[:, :-1] @ rows.T, labels[:, 2:]).mean()
        return main + ahead

    with suspended():  # the CPU kernels have no gradients
        _train(both, loss, steps)
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(destination / "model.safetensors"), weights, metadata={"format": "mlx"})
    head_weights = {}
    names = {
        "embed_norm": "mtp.pre_fc_norm_embedding",
        "hidden_norm": "mtp.pre_fc_norm_hidden",
        "proj": "mtp.fc",
        "norm": "mtp.norm",
    }
    for path, value in tree_flatten(head.parameters()):
        role, _, rest = path.partition(".")
        key = f"mtp.layers.0.{rest}" if role == "block" else f"{names[role]}.{rest}"
        head_weights[key] = value
    mx.save_safetensors(str(destination / "model-mtp.safetensors"), head_weights)
    return destination


def _train(both: Any, loss: Any, steps: int) -> None:
    import mlx.core as mx
    import mlx.nn as nn
    import mlx.optimizers as optim

    optimizer = optim.Adam(learning_rate=3e-3)
    step = nn.value_and_grad(both, loss)
    order = mx.array(cycle_order())
    rng = random.Random(1)
    for _ in range(steps):
        starts = mx.array([rng.randrange(CYCLE) for _ in range(16)])
        walks = order[(starts[:, None] + mx.arange(24)[None]) % CYCLE]
        last, grads = step(both, walks)
        optimizer.update(both, grads)
        mx.eval(both.parameters(), optimizer.state, last)


def trained_once(tokenizer_source: Path) -> Path:
    """The trained model, trained once per machine: kept in var/cache/test-models/ under a
    digest of the code that makes it and MLX's versions; test lanes running at once wait for
    one training (about a minute) instead of each doing its own."""
    import fcntl
    import hashlib
    import os

    import mlx.core as mx
    import mlx_lm

    from tests.support import architectures
    from tests.support.helpers import ROOT

    sources = Path(__file__).read_bytes() + Path(architectures.__file__).read_bytes()
    versions = f"{mx.__version__} {mlx_lm.__version__}".encode()
    digest = hashlib.sha256(sources + versions).hexdigest()[:12]
    root = ROOT / "var/cache/test-models"
    folder = root / f"mtp-trained-{digest}"
    if folder.exists():
        return folder
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not folder.exists():
            partial = root / f".{folder.name}.{os.getpid()}"
            shutil.rmtree(partial, ignore_errors=True)
            trained_mtp_model(tokenizer_source, partial)
            partial.rename(folder)
    return folder
