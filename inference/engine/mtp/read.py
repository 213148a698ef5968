"""A model's MTP head read from its checkpoint at load time (mlx-lm's loader dropped it).

Only the head's tensors are read: the checkpoint's headers say which file holds each, and
MLX reads a safetensors array only when it is evaluated. The block's weights go through the
family's own sanitize presented as layer 0's (so experts are stacked, FP8 blocks
dequantized and Qwen's offset norms shifted exactly as for the model's layers); the head's own
norms take the same shift. A head that cannot be read leaves the model without MTP, with the
reason, which a request for `speculative: mtp` is refused with.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from inference.engine.mtp.families import FAMILIES, Family, Parts, family_of
from inference.engine.mtp.files import checkpoint_keys, heads_in
from inference.engine.mtp.head import MtpHead, MtpHeads, Target, split

log = logging.getLogger(__name__)

OWN = "mtp_own."  # the head's own weights' names while they pass through sanitize
ROLES = ("embed_norm", "hidden_norm", "proj", "final_norm")


def read_heads(folder: Path, model: Any, config: dict) -> tuple[MtpHeads | None, str]:
    """(the model's MTP heads, or None; what was found, or why there are none)."""
    if family_of(config.get("model_type", "")) is None:  # before any file is opened
        return None, heads_in(config, set(), None)[2]
    args = getattr(model, "language_model", model).args
    keys = checkpoint_keys(folder)
    family, layers, missing = heads_in(config, set(keys), args)
    if family is None or missing:
        return None, missing
    target = split(model)  # probed only for a model whose files have a head
    if target is None or not _same_logits(model, target):
        return None, "its layers and output head are not where mlx-lm's models keep them"
    try:
        head = _build(family, family.parts(args, 0), keys, model, target, args)
    except Exception as exc:  # a checkpoint this layout does not fit: said, not raised
        log.warning("MTP head of %s not read: %s", folder, exc)
        return None, f"its MTP head could not be read: {exc}"
    heads = MtpHeads(head, target, type(family).__name__, layers)
    return heads, f"{layers} MTP head(s) ({heads.family} layout), the first drafting"


def _same_logits(model: Any, target: Target) -> bool:
    """Whether the split computes what the model does (a family that post-processes its
    logits, softcapping say, would draft from the wrong ones)."""
    probe = mx.array([[1, 2, 3]])
    logits, _ = target(probe, None)
    return bool(mx.allclose(logits, model(probe), atol=1e-3, rtol=1e-3))


def _build(
    family: Family, parts: Parts, keys: dict[str, Path], model: Any, target: Target, args: Any
) -> MtpHead:
    weights = _sanitized(family, parts, keys, model)
    head = MtpHead(family.block(target.body, args), args.hidden_size, args.rms_norm_eps, family)
    named = {
        (k[len(OWN) :].replace("final_norm.", "norm.", 1) if k.startswith(OWN) else f"block.{k}"): v
        for k, v in weights.items()
    }
    quantized = {k[: -len(".scales")] for k in named if k.endswith(".scales")}
    if quantized:  # a checkpoint converted with its head (mlx-lm's quantized layout)
        q = getattr(args, "quantization", None) or {}
        nn.quantize(
            head,
            group_size=q.get("group_size", 64),
            bits=q.get("bits", 4),
            class_predicate=lambda path, _: path in quantized,
        )
    head.load_weights(list(named.items()), strict=True)
    dtype = getattr(getattr(target.embed, "weight", None), "dtype", None)
    if dtype in FLOATS:  # the model's own float type (the hidden states are cast to it)
        head.set_dtype(dtype, predicate=lambda d: d in FLOATS)
    mx.eval(head.parameters())
    return head


FLOATS = (mx.float16, mx.bfloat16, mx.float32)
# Names inside a NextN or MiMo layer that are not its block's: the head's own parts and the
# copies of the model's embedding and output head (the model's own are used).
NOT_BLOCK = {name.split(".")[0] for f in FAMILIES for name in f.own} | {"embed_tokens"}


def _sanitized(family: Family, parts: Parts, keys: dict[str, Path], model: Any) -> dict:
    """The head's tensors after the family's sanitize: the block's by their names in a layer,
    the head's own under OWN + role."""
    files: dict[Path, dict[str, mx.array]] = {}

    def tensor(key: str) -> mx.array:
        file = keys[key]
        if file not in files:
            files[file] = mx.load(str(file))  # lazy: only what is evaluated is read
        return files[file][key]

    main = family.main_prefix(model)
    roles = dict(zip(_names(parts), ROLES, strict=True))
    present: dict[str, mx.array] = {}
    for key in keys:
        name, _, rest = key.rpartition(".")  # "….eh_proj", "weight" (or scales, …)
        if name in roles:
            present[f"{main}{OWN}{roles[name]}.{rest}"] = tensor(key)
        elif key.startswith(parts.block) and key[len(parts.block) :].split(".")[0] not in NOT_BLOCK:
            present[main + key[len(parts.block) :]] = tensor(key)
    conv = next((k for k in keys if "conv1d.weight" in k), None)
    if conv is not None:  # Qwen3.5 tells an unconverted checkpoint by its conv weights' shape
        present[main + "linear_attn.conv1d.weight"] = tensor(conv)
    before = present.get(main + "input_layernorm.weight")
    out = model.sanitize(dict(present))
    found = {k.split("layers.0.", 1)[1]: v for k, v in out.items() if "layers.0." in k}
    found.pop("linear_attn.conv1d.weight", None)
    after = found.get("input_layernorm.weight")
    if before is not None and after is not None and _shifted(before, after):
        # The family's norms are stored as offsets from 1 (Qwen): the head's own take it too.
        for role in ("embed_norm", "hidden_norm", "final_norm"):
            found[f"{OWN}{role}.weight"] = found[f"{OWN}{role}.weight"] + 1.0
    return found


def _shifted(before: mx.array, after: mx.array) -> bool:
    return bool(mx.all(mx.abs(after.astype(mx.float32) - before.astype(mx.float32) - 1) < 1e-3))


def _names(parts: Parts) -> tuple[str, ...]:
    return (parts.embed_norm, parts.hidden_norm, parts.proj, parts.final_norm)
