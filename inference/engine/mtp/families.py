"""Where each family keeps its MTP head in a checkpoint, and which decoder layer its block is.

A head is: a norm over the next token's embedding, a norm over the model's hidden state, a
projection of the two concatenated back to the model's width, one decoder layer of the
family's own kind (full attention), and a final norm before the model's output head. The
families name those parts differently and concatenate in either order; the block's weights
are named as a main layer's, so the family's own sanitize (mlx-lm's: experts stacked, norms
offset) reads them once they are presented as layer 0's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the catalog reads layouts (files.py) without importing MLX
    import mlx.nn as nn


@dataclass(frozen=True)
class Parts:
    """A head's own weights' names in the checkpoint (full keys, `.weight` left off)."""

    embed_norm: str
    hidden_norm: str
    proj: str
    final_norm: str
    block: str  # the prefix of the block's weights, with its trailing dot


class Family:
    """One checkpoint layout. `embed_first`: the projection reads [embedding, hidden] (else
    [hidden, embedding]); `chain_normed`: a chained guess feeds the head's final-normed output
    back as the next hidden state (else the block's output before that norm), as each family's
    reference implementation does."""

    model_types: tuple[str, ...] = ()
    own: tuple[str, ...] = ()  # the head's own parts' names inside its layer, where it has one
    embed_first = True
    chain_normed = True

    def parts(self, args: Any, index: int) -> Parts:
        raise NotImplementedError

    def layers(self, keys: set[str], args: Any) -> int:
        """How many heads the checkpoint's keys hold."""
        n = 0
        while self.parts(args, n).proj + ".weight" in keys:
            n += 1
        return n

    def block(self, body: Any, args: Any) -> nn.Module:
        """A new decoder layer of the class the model's own layers are (`body`: the model's
        layer stack), as the head's block."""
        raise NotImplementedError

    def main_prefix(self, model: Any) -> str:
        """How the family's sanitize names layer 0's weights (the block is presented so)."""
        return "model.layers.0."


class QwenNext(Family):
    """Qwen3-Next and Qwen3.5 (dense and MoE): `mtp.fc`, `mtp.pre_fc_norm_embedding`,
    `mtp.pre_fc_norm_hidden`, `mtp.layers.N`, `mtp.norm`; its block is a full-attention
    layer of the model's kind (MoE where the model's layers are)."""

    model_types = ("qwen3_next", "qwen3_5", "qwen3_5_moe")

    def parts(self, args: Any, index: int) -> Parts:
        return Parts(
            "mtp.pre_fc_norm_embedding",
            "mtp.pre_fc_norm_hidden",
            "mtp.fc",
            "mtp.norm",
            f"mtp.layers.{index}.",
        )

    def layers(self, keys: set[str], args: Any) -> int:
        if "mtp.fc.weight" not in keys:
            return 0
        return len({k.split(".")[2] for k in keys if k.startswith("mtp.layers.")})

    def block(self, body: Any, args: Any) -> nn.Module:
        place = args.full_attention_interval - 1  # a full-attention layer's place
        return type(body.layers[place])(args, place)

    def main_prefix(self, model: Any) -> str:
        # Qwen3.5's checkpoint keeps its text layers under model.language_model.
        wrapped = hasattr(model, "language_model")
        return "model.language_model.layers.0." if wrapped else "model.layers.0."


class NextN(Family):
    """DeepSeek V3 / V3.2 and GLM-4.5+ (and GLM-4.7-Flash): the NextN layer is numbered
    past the model's last, `model.layers.{L}` with `enorm`, `hnorm`, `eh_proj` and
    `shared_head.norm`, its block the layer's other weights (MLA / MoE as the model's)."""

    model_types = ("deepseek_v3", "deepseek_v32", "glm4_moe", "glm4_moe_lite")
    chain_normed = False

    own = ("enorm", "hnorm", "eh_proj", "shared_head.norm")

    def parts(self, args: Any, index: int) -> Parts:
        return _in_layer(f"model.layers.{args.num_hidden_layers + index}.", self.own)

    def block(self, body: Any, args: Any) -> nn.Module:
        return type(body.layers[-1])(args, args.num_hidden_layers)  # a MoE layer's place


class MiMo(Family):
    """MiMo: `model.mtp_layers.N` with `token_layernorm`, `hidden_layernorm`, `input_proj`
    (over [hidden, embedding]) and `final_layernorm`; its block a Qwen2-style layer."""

    model_types = ("mimo",)
    embed_first = False

    own = ("token_layernorm", "hidden_layernorm", "input_proj", "final_layernorm")

    def parts(self, args: Any, index: int) -> Parts:
        return _in_layer(f"model.mtp_layers.{index}.", self.own)

    def block(self, body: Any, args: Any) -> nn.Module:
        return type(body.layers[0])(args)


def _in_layer(layer: str, own: tuple[str, str, str, str]) -> Parts:
    """A head whose own parts sit in its layer beside its block's weights."""
    return Parts(*(layer + name for name in own), block=layer)


FAMILIES: tuple[Family, ...] = (QwenNext(), NextN(), MiMo())


def family_of(model_type: str) -> Family | None:
    return next((f for f in FAMILIES if model_type in f.model_types), None)
